// Package release builds kubeboot's release into a directory (make
// release's dist/): for each architecture a tarball, a .deb and an .rpm
// (through nfpm) holding the binary, kubeboot-bootstrap.service, the
// shell completions and the man pages (cobra's doc), then an SPDX SBOM of
// the Go modules compiled into the binary and SHA256SUMS. Every byte of
// it follows from the commit: the binaries are built with -trimpath and
// without VCS stamping, and every archive member has the commit's time
// (SOURCE_DATE_EPOCH), root's ownership and a sorted place.
package release

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// Arches are the architectures a release is built for.
var Arches = []string{"amd64", "arm64"}

// VersionPackage is the variable the build stamps with the version.
const VersionPackage = "github.com/kubeboot/kubeboot/cmd/kubeboot/app.version"

// Options says what to build and where.
type Options struct {
	// Source is the module's directory, where ./cmd/kubeboot is built.
	Source string
	// Out is the directory the release is written into; it is created if
	// missing, and files of the release's names are replaced (make release
	// empties it first).
	Out string
	// Version is the release's version, git describe's.
	Version string
	// Time is every file's modification time: the commit's
	// (SOURCE_DATE_EPOCH).
	Time time.Time
	// Commands is kubeboot's command tree, which the completions and man
	// pages describe.
	Commands *cobra.Command
	// Go is the go command (default "go").
	Go string
	// Arches are the architectures to build (default Arches).
	Arches []string
}

// Build writes the release into o.Out and returns the names of the files
// it wrote, SHA256SUMS last.
func Build(ctx context.Context, o Options) ([]string, error) {
	if o.Version == "" || o.Source == "" || o.Out == "" || o.Commands == nil || o.Time.IsZero() {
		return nil, errors.New("release: the source, output directory, version, time and commands are all needed")
	}
	if o.Go == "" {
		o.Go = "go"
	}
	if len(o.Arches) == 0 {
		o.Arches = Arches
	}
	o.Time = o.Time.UTC()
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "kubeboot-release-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(work) }()

	docs, err := generateDocs(o.Commands, o.Version, o.Time)
	if err != nil {
		return nil, err
	}
	var written []string
	var sbomBinary string
	for _, arch := range o.Arches {
		bin := filepath.Join(work, "kubeboot-linux-"+arch)
		if err := buildBinary(ctx, o, arch, bin); err != nil {
			return nil, err
		}
		if sbomBinary == "" {
			sbomBinary = bin
		}
		binary, err := os.ReadFile(bin)
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("kubeboot_%s_linux_%s.tar.gz", o.Version, arch)
		if err := writeFile(filepath.Join(o.Out, name), func(w io.Writer) error {
			return writeTarball(w, tarballRoot(o.Version, arch), tarballFiles(binary, docs), o.Time)
		}); err != nil {
			return nil, err
		}
		written = append(written, name)
		for _, format := range []string{"deb", "rpm"} {
			name, err := writePackage(o.Out, format, arch, o.Version, bin, docs, o.Time)
			if err != nil {
				return nil, err
			}
			written = append(written, name)
		}
	}
	sbom, err := spdxFromBinary(sbomBinary, o.Version, o.Time)
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("kubeboot_%s.spdx.json", o.Version)
	if err := os.WriteFile(filepath.Join(o.Out, name), sbom, 0o644); err != nil {
		return nil, err
	}
	written = append(written, name)
	slices.Sort(written)
	sums, err := checksums(o.Out, written)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(o.Out, "SHA256SUMS"), sums, 0o644); err != nil {
		return nil, err
	}
	return append(written, "SHA256SUMS"), nil
}

// Deb writes, at path, the .deb of the kubeboot binary at binary for
// this machine's architecture, as Build would package it: what the lab's
// machines install, made from the kubeboot under test rather than built
// again. o.Source, o.Out, o.Go and o.Arches are not used.
func Deb(path, binary string, o Options) error {
	if o.Version == "" || o.Commands == nil || o.Time.IsZero() {
		return errors.New("release: the version, time and commands are all needed")
	}
	docs, err := generateDocs(o.Commands, o.Version, o.Time.UTC())
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return writePackageTo(path, "deb", runtime.GOARCH, o.Version, binary, docs, o.Time.UTC())
}

// buildBinary builds ./cmd/kubeboot for linux/arch into out, reproducibly:
// static, -trimpath, no VCS stamp, no build ID from the host.
func buildBinary(ctx context.Context, o Options, arch, out string) error {
	cmd := exec.CommandContext(ctx, o.Go, "build", "-trimpath", "-buildvcs=false",
		"-ldflags", "-s -w -buildid= -X "+VersionPackage+"="+o.Version,
		"-o", out, "./cmd/kubeboot")
	cmd.Dir = o.Source
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=-mod=readonly")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build linux/%s: %w\n%s", arch, err, stderr.String())
	}
	return nil
}

// writeFile writes a file through write, removing it if write fails.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
	}
	return err
}

// checksums is SHA256SUMS of the named files in dir, in sha256sum's format.
func checksums(dir string, names []string) ([]byte, error) {
	var b strings.Builder
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(data)
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(sum[:]), name)
	}
	return []byte(b.String()), nil
}
