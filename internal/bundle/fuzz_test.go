package bundle

import (
	"bytes"
	"testing"
)

// fuzzKey is fixed, so that the seed bundles sealed with it authenticate.
var fuzzKey = bytes.Repeat([]byte{0x42}, KeySize)

// sealPlain seals arbitrary plaintext as Seal seals JSON, with a fixed
// nonce, so that the fuzzer also reaches the decoding behind the AEAD,
// which random bytes never authenticate to.
func sealPlain(t *testing.T, plain []byte) []byte {
	aead, err := newAEAD(fuzzKey)
	if err != nil {
		t.Fatal(err)
	}
	nonce := make([]byte, nonceSize)
	return aead.Seal(append([]byte(magic), nonce...), nonce, plain, []byte(magic))
}

// FuzzOpen feeds arbitrary bytes to Open with a fixed key, both as a
// bundle and as the plaintext of an authentic one: a bundle that is
// truncated, foreign or tampered with, or holds anything but a map of
// files, must be an error, never a panic.
func FuzzOpen(f *testing.F) {
	for _, files := range []map[string][]byte{
		{"ca.crt": []byte("-----BEGIN CERTIFICATE-----\n"), "ca.key": []byte("key"), "sa.pub": {0, 1, 2}},
		{},
		nil,
	} {
		sealed, err := Seal(fuzzKey, files)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(sealed)
	}
	for _, seed := range []string{magic, magic + "short", "not a bundle", "", `{"ca.crt":"Y2VydA=="}`, `{"a":null}`, `[1]`, `{"a":"!!"}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, bundle := range [][]byte{data, sealPlain(t, data)} {
			files, err := Open(fuzzKey, bundle)
			if err != nil && files != nil {
				t.Errorf("Open returned files with error %v", err)
			}
		}
	})
}
