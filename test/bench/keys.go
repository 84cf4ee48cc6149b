package main

import (
	"bufio"
	"context"
	"crypto"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// countKeys counts the distinct private keys of a node's PKI dir tree: the
// *.key files and the client keys embedded in *.conf kubeconfigs. Keys are
// compared by their public half, so one key stored twice counts once.
func countKeys(dir string) (int, error) {
	seen := map[string]bool{}
	add := func(pemData []byte, where string) error {
		block, _ := pem.Decode(pemData)
		if block == nil || !strings.HasSuffix(block.Type, "PRIVATE KEY") {
			return nil // sa.key is the only .key; anything else is not a key
		}
		key, err := parseKey(block)
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		pub, err := x509.MarshalPKIXPublicKey(key.Public())
		if err != nil {
			return err
		}
		seen[string(pub)] = true
		return nil
	}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		switch filepath.Ext(path) {
		case ".key":
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return add(data, path)
		case ".conf":
			data, err := embeddedKey(path)
			if err != nil || data == nil {
				return err
			}
			return add(data, path)
		}
		return nil
	})
	return len(seen), err
}

func parseKey(block *pem.Block) (crypto.Signer, error) {
	var key any
	var err error
	switch block.Type {
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	}
	if err != nil {
		return nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("unexpected key type %T", key)
	}
	return signer, nil
}

// embeddedKey returns the PEM of a kubeconfig's client-key-data, or nil.
func embeddedKey(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		if _, b64, ok := strings.Cut(s.Text(), "client-key-data: "); ok {
			return base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
		}
	}
	return nil, s.Err()
}

// keygenShare profiles BenchmarkPKI/rsa-2048 and returns the share of its
// CPU time spent in rsa.GenerateKey, in percent.
func keygenShare(ctx context.Context, o options) (float64, error) {
	logf("profile: BenchmarkPKI/rsa-2048")
	prof, bin := filepath.Join(o.rawDir, "pki-rsa-2048.prof"), filepath.Join(o.rawDir, "pki.test")
	if _, err := goTest(ctx, o, "pki-rsa-2048.txt", "test", "./pki", "-run", "^$", "-bench", "^BenchmarkPKI$/^rsa-2048$", "-benchtime", "5x", "-cpuprofile", prof, "-o", bin); err != nil {
		return 0, err
	}
	top, err := output(ctx, o.goBin, "tool", "pprof", "-top", "-cum", bin, prof)
	if err != nil {
		return 0, err
	}
	// Lines read: flat flat% sum% cum cum% name.
	for line := range strings.Lines(top) {
		f := strings.Fields(line)
		if len(f) == 6 && f[5] == "crypto/rsa.GenerateKey" {
			return strconv.ParseFloat(strings.TrimSuffix(f[4], "%"), 64)
		}
	}
	return 0, fmt.Errorf("crypto/rsa.GenerateKey not in the profile:\n%s", top)
}
