package rotateca

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/kubeboot/kubeboot/internal/nodepod"
	"github.com/kubeboot/kubeboot/pki"
)

// stepUnit is the transient unit of a node's step.
const stepUnit = "kubeboot-rotate-ca"

// OnNode is a node's own part of a step of `certs rotate-ca`, which the
// rotation's pod runs inside the node's root (nodepod.Enter): the
// rotation's files, read from the pod's Secret volume before, are put
// under the units' directory, and `kubeboot certs rotate-ca step` runs on
// them and the node's file as a transient systemd unit, which restarting
// the kubelet does not stop.
type OnNode struct {
	// Step is the node's step.
	Step pki.RotationStep
	// Config is the node's file. A worker without it that `kubeadm join`
	// joined runs the step on kubeadm's paths.
	Config string
	// ControlPlane says the node runs the control plane, which has its file.
	ControlPlane bool
	// Files are the rotation's files (ReadFiles).
	Files map[string][]byte
}

// ReadFiles reads the rotation's files from dir, a Secret's volume: each
// regular file, or link to one, whose name does not begin with "..".
func ReadFiles(dir string) (map[string][]byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read the rotation's files: %w", err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..") || e.IsDir() {
			continue
		}
		if files[e.Name()], err = os.ReadFile(filepath.Join(dir, e.Name())); err != nil {
			return nil, fmt.Errorf("read the rotation's files: %w", err)
		}
	}
	return files, nil
}

// Run writes the rotation's files for the unit, runs the step, prints its
// output to out, and removes the files.
func (o OnNode) Run(ctx context.Context, h nodepod.Host, out io.Writer) error {
	argv := []string{h.Kubeboot, "certs", "rotate-ca", "step", string(o.Step)}
	_, err := os.Stat(o.Config)
	switch {
	case err == nil:
		argv = append(argv, "--config", o.Config)
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: %w", o.Config, err)
	case o.ControlPlane:
		return fmt.Errorf("this control-plane node has no %s: run `kubeboot certs rotate-ca step %s --config FILE` on it by hand, or name the file every node has with certs rotate-ca --node-config", o.Config, o.Step)
	}
	if err := h.CheckSystemd("certs rotate-ca", "run `kubeboot certs rotate-ca step` on it by hand"); err != nil {
		return err
	}
	dir := filepath.Join(h.LogDir, "rotate-ca")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	for name, data := range o.Files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	argv = append(argv, "--files", dir, "-o", "json")
	if err := h.Unit(ctx, stepUnit, nil, argv, out); err != nil {
		return fmt.Errorf("kubeboot certs rotate-ca step %s: %w", o.Step, err)
	}
	return nil
}
