// Package bundle owns the encrypted file format that carries a cluster's
// shared secrets (the CAs, the service-account key pair and the
// encryption-at-rest configuration) from the first control-plane node to
// the ones that join it. It seals and opens bytes; apart from reading a
// bundle and its key from the files users hand kubeboot (through
// inputfile), it never touches disk, and it never prints.
//
// A bundle is the magic "KBBUNDLE1\n", a 12-byte random nonce, then the
// AES-256-GCM ciphertext of a JSON object mapping file names to their
// contents. The magic is the additional authenticated data, so changing
// any byte of the bundle, header included, makes Open fail.
package bundle

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/inputfile"
)

// KeySize is the length of a bundle key: AES-256.
const KeySize = 32

// magic starts every bundle; it versions the format.
const magic = "KBBUNDLE1\n"

// nonceSize is GCM's standard nonce length.
const nonceSize = 12

// ErrAuth is returned when a bundle does not decrypt: the key is wrong or
// the bundle was changed. GCM cannot tell the two apart.
var ErrAuth = errors.New("the bundle does not decrypt with this key: the key is wrong or the bundle was modified")

// NewKey returns a random bundle key.
func NewKey() ([]byte, error) {
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("generate bundle key: %w", err)
	}
	return key, nil
}

// EncodeKey returns key as the hex text users copy between nodes.
func EncodeKey(key []byte) string { return hex.EncodeToString(key) }

// DecodeKey parses a hex key as EncodeKey writes it; surrounding
// whitespace, such as a key file's trailing newline, is ignored.
func DecodeKey(text string) ([]byte, error) {
	text = strings.TrimSpace(text)
	// Check the length first: an odd count is otherwise a hex error, and
	// a key cut short by one digit is the likely mistake.
	if n := utf8.RuneCountInString(text); n != hex.EncodedLen(KeySize) {
		return nil, fmt.Errorf("decode bundle key: want %d hex digits, got %d", hex.EncodedLen(KeySize), n)
	}
	key, err := hex.DecodeString(text)
	if err != nil {
		// The parse error would quote part of the key: say only what is wrong.
		return nil, errors.New("decode bundle key: not hexadecimal")
	}
	return key, nil
}

// Seal encrypts files, a map of file names to contents, with key.
func Seal(key []byte, files map[string][]byte) ([]byte, error) {
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	plain, err := json.Marshal(files)
	if err != nil {
		return nil, fmt.Errorf("encode bundle: %w", err)
	}
	nonce := make([]byte, nonceSize)
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("generate bundle nonce: %w", err)
	}
	out := append([]byte(magic), nonce...)
	return aead.Seal(out, nonce, plain, []byte(magic)), nil
}

// Open decrypts and authenticates a bundle made by Seal. It returns
// ErrAuth for a wrong key or a modified bundle, and a format error for
// data that is not a bundle at all or is truncated.
func Open(key []byte, data []byte) (map[string][]byte, error) {
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	if !bytes.HasPrefix(data, []byte(magic)) {
		return nil, errors.New("open bundle: not a kubeboot certificate bundle (bad header)")
	}
	rest := data[len(magic):]
	if len(rest) < nonceSize+aead.Overhead() {
		return nil, fmt.Errorf("open bundle: truncated (%d bytes)", len(data))
	}
	plain, err := aead.Open(nil, rest[:nonceSize], rest[nonceSize:], []byte(magic))
	if err != nil {
		return nil, ErrAuth
	}
	var files map[string][]byte
	if err := json.Unmarshal(plain, &files); err != nil {
		return nil, fmt.Errorf("decode bundle: %w", err)
	}
	return files, nil
}

// fileFix is how to get a bundle and its key right.
const fileFix = "pass the file `kubeboot certs export --out FILE` wrote and the key it printed (or read from its --key-file)"

// ReadKey reads a key file as `kubeboot certs export` prints keys (see
// EncodeKey). A file that cannot be read or holds no key is a usage error
// (exit 2).
func ReadKey(path string) ([]byte, error) {
	text, err := inputfile.Read(path, inputfile.KeyLimit)
	if err != nil {
		return nil, &exit.UsageError{Msg: fmt.Sprintf("read bundle key %q: %v", path, err)}
	}
	key, err := DecodeKey(string(text))
	if err != nil {
		return nil, &exit.UsageError{Msg: fmt.Sprintf("read bundle key %q: %v", path, err)}
	}
	return key, nil
}

// OpenFile reads the bundle at path (--certs-bundle) and opens it with the
// key in keyFile (--key-file, see ReadKey). A bundle that cannot be read
// or does not open is a usage error (exit 2) that says how to get it
// right.
func OpenFile(path, keyFile string) (map[string][]byte, error) {
	key, err := ReadKey(keyFile)
	if err != nil {
		return nil, err
	}
	data, err := inputfile.Read(path, inputfile.BundleLimit)
	if err != nil {
		return nil, &exit.UsageError{Msg: fmt.Sprintf("--certs-bundle: read certificate bundle %q: %v: %s", path, err, fileFix)}
	}
	files, err := Open(key, data)
	if err != nil {
		return nil, &exit.UsageError{Msg: fmt.Sprintf("--certs-bundle: open certificate bundle %q with --key-file %q: %v: %s", path, keyFile, err, fileFix)}
	}
	return files, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("use bundle key: %d bytes, want %d", len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("use bundle key: %w", err)
	}
	return cipher.NewGCM(block)
}
