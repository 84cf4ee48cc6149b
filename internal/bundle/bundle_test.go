package bundle

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kubeboot/kubeboot/internal/exit"
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

// TestReadKeyAndOpenFile: a bundle and its key read from files, as a
// joining node gets them; whatever cannot be read or does not open is a
// usage error that says how to get it right, and never shows the key.
func TestReadKeyAndOpenFile(t *testing.T) {
	key, data, files := sealed(t)
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	keyFile := write("key", []byte(EncodeKey(key)+"\n"))
	path := write("bundle", data)
	if got, err := ReadKey(keyFile); err != nil || !bytes.Equal(got, key) {
		t.Errorf("ReadKey: %v", err)
	}
	got, err := OpenFile(path, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(files, got); diff != "" {
		t.Errorf("OpenFile (-want +got):\n%s", diff)
	}

	other, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	short := EncodeKey(key)[:63]
	for _, tc := range []struct {
		name, path, keyFile, want string
	}{
		{"no key file", path, filepath.Join(dir, "none"), "read bundle key"},
		{"a short key", path, write("short", []byte(short)), "want 64 hex digits, got 63"},
		{"no bundle", filepath.Join(dir, "none"), keyFile, "--certs-bundle: read certificate bundle"},
		{"a directory", dir, keyFile, "not a regular file"},
		{"the wrong key", path, write("other", []byte(EncodeKey(other))), ErrAuth.Error()},
		{"a key for a bundle", keyFile, keyFile, "not a kubeboot certificate bundle"},
	} {
		_, err := OpenFile(tc.path, tc.keyFile)
		var usage *exit.UsageError
		if !errors.As(err, &usage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a usage error with %q", tc.name, err, tc.want)
		}
		if err != nil && (strings.Contains(err.Error(), short) || strings.Contains(err.Error(), EncodeKey(other))) {
			t.Errorf("%s: the error shows the key: %v", tc.name, err)
		}
	}
	for _, want := range []string{"--certs-bundle", "kubeboot certs export --out FILE"} {
		if _, err := OpenFile(filepath.Join(dir, "none"), keyFile); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a missing bundle: %v, want %q", err, want)
		}
	}
}
