package bundle

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func sealed(t *testing.T) (key, data []byte, files map[string][]byte) {
	t.Helper()
	key, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	files = map[string][]byte{"ca.crt": []byte("cert"), "ca.key": []byte("secret key"), "sa.pub": {0, 1, 2}}
	data, err = Seal(key, files)
	if err != nil {
		t.Fatal(err)
	}
	return key, data, files
}

func TestRoundTrip(t *testing.T) {
	key, data, files := sealed(t)
	got, err := Open(key, data)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(files, got); diff != "" {
		t.Errorf("Open(Seal(files)) differs (-want +got):\n%s", diff)
	}
	if bytes.Contains(data, []byte("secret key")) {
		t.Error("the sealed bundle contains the plaintext")
	}
}

func TestSealUsesFreshNonces(t *testing.T) {
	key, a, files := sealed(t)
	b, err := Seal(key, files)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a, b) {
		t.Error("two seals of the same files are identical: the nonce is reused")
	}
}

// TestTamper flips one byte in each region: header, nonce, ciphertext, tag.
func TestTamper(t *testing.T) {
	key, data, _ := sealed(t)
	for name, i := range map[string]int{
		"header":     0,
		"nonce":      len(magic),
		"ciphertext": len(magic) + nonceSize,
		"tag":        len(data) - 1,
	} {
		t.Run(name, func(t *testing.T) {
			bad := bytes.Clone(data)
			bad[i] ^= 0x01
			if files, err := Open(key, bad); err == nil {
				t.Fatalf("Open accepted a bundle with a changed %s: %v", name, files)
			}
		})
	}
}

func TestWrongKey(t *testing.T) {
	_, data, _ := sealed(t)
	other, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(other, data); !errors.Is(err, ErrAuth) {
		t.Fatalf("Open with another key: got %v, want ErrAuth", err)
	}
}

func TestTruncated(t *testing.T) {
	key, data, _ := sealed(t)
	for _, n := range []int{0, 3, len(magic), len(magic) + nonceSize, len(data) - 1} {
		if _, err := Open(key, data[:n]); err == nil {
			t.Errorf("Open accepted the first %d of %d bytes", n, len(data))
		}
	}
}

func TestKeyText(t *testing.T) {
	key, _, _ := sealed(t)
	got, err := DecodeKey(EncodeKey(key) + "\n")
	if err != nil || !bytes.Equal(got, key) {
		t.Fatalf("DecodeKey(EncodeKey(key)) = %x, %v", got, err)
	}
	for _, bad := range []string{"", "zz", strings.Repeat("ab", 16), strings.Repeat("ab", 33)} {
		if _, err := DecodeKey(bad); err == nil {
			t.Errorf("DecodeKey(%q) succeeded", bad)
		}
	}
	for _, tt := range []struct{ text, want string }{
		{strings.Repeat("a", 63), "want 64 hex digits, got 63"},
		{strings.Repeat("a", 65) + "\n", "want 64 hex digits, got 65"},
		{"", "want 64 hex digits, got 0"},
		{strings.Repeat("g", 64), "not hexadecimal"},
	} {
		if _, err := DecodeKey(tt.text); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("DecodeKey(%d characters): got %v, want an error containing %q", len(tt.text), err, tt.want)
		}
	}
	// An error never quotes the key it could not parse.
	secret := strings.Repeat("q1", 32)
	if _, err := DecodeKey(secret); err == nil || strings.Contains(err.Error(), "q1q1") {
		t.Errorf("DecodeKey error %v leaks the input", err)
	}
}
