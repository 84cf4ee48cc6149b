package phases

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"

	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/inputfile"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/pki"
	"github.com/kubeboot/kubeboot/templates"
)

// Modes of the API server's configuration: only root reads them, as CIS
// asks of every control-plane file; the audit log is no more public.
const (
	// APIServerFileMode is the mode of every file the API server reads its
	// configuration from.
	APIServerFileMode fs.FileMode = 0o600
	apiServerDirMode  fs.FileMode = 0o700
)

// APIServerConfig writes the files the API server reads beside its flags.
var APIServerConfig = workflow.Phase[*Node]{
	Name:  "apiserver-config",
	Short: "Write the API server's encryption, audit, admission and authentication configuration",
	Run:   runAPIServerConfig,
}

func runAPIServerConfig(_ context.Context, s *Node) error {
	sec := s.Config.Security
	if config.On(sec.EncryptionAtRest.Enabled) {
		if err := ensureEncryptionConfig(s); err != nil {
			return err
		}
	}
	if config.On(sec.Audit.Enabled) {
		if sec.Audit.PolicyFile != "" {
			if err := checkAuditPolicy(s, sec.Audit.PolicyFile); err != nil {
				return err
			}
		}
		// The API server would create it with its own umask, readable by all.
		if err := s.Files.MkdirAll(sec.Audit.LogDir, apiServerDirMode); err != nil {
			return err
		}
	}
	files, err := templates.APIServerFiles(s.Config)
	if err != nil || len(files) == 0 {
		return err
	}
	if err := s.Files.MkdirAll(s.Config.APIServerConfigDir(), apiServerDirMode); err != nil {
		return err
	}
	// The writer reports each file it writes, or would write.
	for _, f := range files {
		if err := s.Files.WriteFile(f.Path, f.Data, APIServerFileMode); err != nil {
			return err
		}
	}
	return nil
}

// ensureEncryptionConfig converges the encryption configuration. Losing
// its key loses every Secret, so an existing valid file is kept byte for
// byte, even when it no longer matches the configuration (an operator
// rotating keys edits it), and an invalid one is an error for a human to
// resolve. Only a missing file gets a new random key. Nothing here prints
// the key: messages name the file only.
func ensureEncryptionConfig(s *Node) error {
	path := s.Config.EncryptionConfigPath()
	want := s.Config.Security.EncryptionAtRest.Provider
	data, err := s.Files.ReadFile(path)
	switch {
	case err == nil:
		if err := inputfile.CheckYAML(path, data, inputfile.ConfigNodes); err != nil {
			return fmt.Errorf("check encryption configuration: %w (fix the file by hand; do not delete it while Secrets are encrypted with its keys)", err)
		}
		provider, err := templates.CheckEncryptionConfig(data)
		if err != nil {
			return fmt.Errorf("check encryption configuration %q: %w (fix the file by hand; do not delete it while Secrets are encrypted with its keys)", path, err)
		}
		switch provider {
		case want:
		case "identity":
			s.Report.Warnf("%s stores new Secrets unencrypted (identity comes first); kubeboot keeps the file as it is", path)
		default:
			s.Report.Warnf("%s encrypts new Secrets with %s, not %s; kubeboot keeps the file as it is (see docs/security.md to rotate keys)", path, provider, want)
		}
		// Rewriting the same bytes only tightens a loose mode.
		return s.Files.WriteFile(path, data, APIServerFileMode)
	case errors.Is(err, fs.ErrNotExist):
		key := make([]byte, templates.EncryptionKeySize)
		if _, err := rand.Read(key); err != nil {
			return fmt.Errorf("generate encryption key for %q: %w", path, err)
		}
		if data, err = templates.EncryptionConfig(want, key); err != nil {
			return err
		}
		if err := s.Files.MkdirAll(s.Config.Certificates.Dir, pki.ModeDir); err != nil {
			return err
		}
		if err := s.Files.WriteFile(path, data, APIServerFileMode); err != nil {
			return err
		}
		s.Report.Infof("new %s key in %s: back it up with the CA; Secrets cannot be read without it", want, path)
		return nil
	default:
		return fmt.Errorf("read encryption configuration %q: %w", path, err)
	}
}

// checkAuditPolicy makes sure a user's audit policy is there and is one,
// so a typo in the path fails here rather than in a crash-looping API server.
func checkAuditPolicy(s *Node, path string) error {
	data, err := s.Files.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read audit policy %q: not found: write it, or unset security.audit.policyFile to use kubeboot's", path)
	}
	if err != nil {
		return fmt.Errorf("read audit policy %q: %w", path, err)
	}
	if err := inputfile.CheckYAML(path, data, inputfile.ConfigNodes); err != nil {
		return fmt.Errorf("check audit policy (security.audit.policyFile): %w", err)
	}
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(data, &head); err != nil || head.APIVersion != "audit.k8s.io/v1" || head.Kind != "Policy" {
		return fmt.Errorf("check audit policy %q: want an audit.k8s.io/v1 Policy", path)
	}
	return nil
}
