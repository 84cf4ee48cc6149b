//go:build e2e

package e2e

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// crashStateProblems checks what a killed init left in the node's dir:
// every non-dot file is complete and parses as what it is, and the
// manifests, written and staged, pass kubeboot validate. Dot-prefixed temp
// files of an interrupted atomic write are allowed.
func crashStateProblems(t *testing.T, n *node) []string {
	t.Helper()
	var problems []string
	var manifests []string
	err := filepath.WalkDir(n.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path == n.dir {
				return filepath.SkipDir // killed before the first write
			}
			return err
		}
		name := d.Name()
		if d.IsDir() || !d.Type().IsRegular() || strings.HasPrefix(name, ".") {
			return nil
		}
		if strings.Contains(name, "tmp") {
			problems = append(problems, "a temp file the kubelet would read: "+path)
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if rel, _ := filepath.Rel(n.dir, path); rel == "kubeboot/lock" {
			// The node lock outlives a killed holder (the kernel drops only
			// the flock); the next run takes it over. Its content names the
			// holder, or is empty when the kill came before it was written.
			if err := checkLockFile(data); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", path, err))
			}
			return nil
		}
		if len(data) == 0 {
			problems = append(problems, "empty file: "+path)
			return nil
		}
		rel, _ := filepath.Rel(n.dir, path)
		if filepath.Ext(name) == ".yaml" && (filepath.Dir(rel) == "manifests" || filepath.Dir(rel) == "kubeboot/staged") {
			manifests = append(manifests, path)
			return nil
		}
		if err := checkFile(rel, data); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", path, err))
		}
		return nil
	})
	if err != nil {
		problems = append(problems, "walk "+n.dir+": "+err.Error())
	}
	if len(manifests) > 0 {
		r := n.kubeboot(t, append([]string{"validate"}, manifests...)...)
		if r.code != 0 {
			problems = append(problems, fmt.Sprintf("kubeboot validate exited %d: %s%s", r.code, r.stdout, r.stderr))
		}
	}
	return problems
}

// checkLockFile accepts an empty node lock or one naming its holder: a pid
// line, then the command line.
func checkLockFile(data []byte) error {
	if len(data) == 0 {
		return nil
	}
	pid, command, ok := strings.Cut(strings.TrimSuffix(string(data), "\n"), "\n")
	if _, err := strconv.Atoi(pid); err != nil || !ok || !strings.HasPrefix(command, "kubeboot") {
		return fmt.Errorf("a node lock that does not name its holder: %q", data)
	}
	return nil
}

// checkFile parses a file kubeboot writes, by where it is and its extension.
func checkFile(rel string, data []byte) error {
	dir, ext := filepath.Dir(rel), filepath.Ext(rel)
	switch {
	case (dir == "pki" || dir == "pki/etcd") && (ext == ".crt" || ext == ".key" || ext == ".pub"):
		return checkPEM(ext, data)
	case dir == "." && ext == ".conf":
		return checkKubeconfig(data)
	case rel == "kubelet/config.yaml":
		return checkKind(data, "KubeletConfiguration")
	case rel == "pki/encryption-config.yaml":
		return checkKind(data, "EncryptionConfiguration")
	case rel == "apiserver/audit-policy.yaml":
		return checkKind(data, "Policy")
	case rel == "apiserver/admission-config.yaml":
		return checkKind(data, "AdmissionConfiguration")
	case rel == "apiserver/authentication-config.yaml":
		return checkKind(data, "AuthenticationConfiguration")
	}
	return fmt.Errorf("a file kubeboot does not write")
}

// checkKind parses a YAML document and checks its kind.
func checkKind(data []byte, want string) error {
	var doc struct {
		Kind string `json:"kind"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return err
	}
	if doc.Kind != want {
		return fmt.Errorf("kind %q, want %s", doc.Kind, want)
	}
	return nil
}

// checkPEM parses every PEM block of a certificate, key or public key file
// and rejects anything else in it.
func checkPEM(ext string, data []byte) error {
	rest := data
	blocks := 0
	for {
		block, r := pem.Decode(rest)
		if block == nil {
			break
		}
		rest = r
		blocks++
		if err := parseBlock(ext, block); err != nil {
			return fmt.Errorf("PEM block %d (%s): %w", blocks, block.Type, err)
		}
	}
	if blocks == 0 {
		return fmt.Errorf("no PEM block in %d bytes", len(data))
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return fmt.Errorf("%d bytes after the last PEM block", len(rest))
	}
	return nil
}

func parseBlock(ext string, block *pem.Block) error {
	var err error
	switch {
	case ext == ".crt" && block.Type == "CERTIFICATE":
		_, err = x509.ParseCertificate(block.Bytes)
	case ext == ".pub" && block.Type == "PUBLIC KEY":
		_, err = x509.ParsePKIXPublicKey(block.Bytes)
	case ext == ".key" && block.Type == "PRIVATE KEY":
		_, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case ext == ".key" && block.Type == "RSA PRIVATE KEY":
		_, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case ext == ".key" && block.Type == "EC PRIVATE KEY":
		_, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		err = fmt.Errorf("unexpected block type in a %s file", ext)
	}
	return err
}

// checkKubeconfig loads a kubeconfig and parses its embedded certificates.
func checkKubeconfig(data []byte) error {
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return err
	}
	if cfg.CurrentContext == "" || len(cfg.Clusters) == 0 || len(cfg.AuthInfos) == 0 {
		return fmt.Errorf("incomplete kubeconfig: current context %q, %d clusters, %d users", cfg.CurrentContext, len(cfg.Clusters), len(cfg.AuthInfos))
	}
	for name, c := range cfg.Clusters {
		if err := checkPEM(".crt", c.CertificateAuthorityData); err != nil {
			return fmt.Errorf("cluster %s CA: %w", name, err)
		}
	}
	for name, u := range cfg.AuthInfos {
		if err := checkPEM(".crt", u.ClientCertificateData); err != nil {
			return fmt.Errorf("user %s certificate: %w", name, err)
		}
		if err := checkPEM(".key", u.ClientKeyData); err != nil {
			return fmt.Errorf("user %s key: %w", name, err)
		}
	}
	return nil
}
