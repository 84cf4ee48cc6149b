package release

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"
	"github.com/goreleaser/nfpm/v2/rpm"

	"github.com/kubeboot/kubeboot/internal/bootstrap"
)

// Where the packages install what they hold.
const (
	BinaryPath = "/usr/bin/kubeboot"
	// UnitPath is the unit's place among the packages' units: installed,
	// never enabled (a node's image or its administrator enables it, once
	// node.yaml is in place).
	UnitPath       = "/usr/lib/systemd/system/kubeboot-bootstrap.service"
	bashCompletion = "/usr/share/bash-completion/completions/kubeboot"
	fishCompletion = "/usr/share/fish/vendor_completions.d/kubeboot.fish"
	// zsh's own directory for packages' functions differs: Debian's zsh
	// reads vendor-completions, Fedora's site-functions.
	debZshCompletion = "/usr/share/zsh/vendor-completions/_kubeboot"
	rpmZshCompletion = "/usr/share/zsh/site-functions/_kubeboot"
	manDir           = "/usr/share/man/man1/"
)

// The packages' relations. Depends: systemd, since what the package adds
// beside the binary is a systemd unit, and kubelet-start drives
// kubelet.service through systemd; the binary is static and needs no
// library.
// Recommends: a kubelet and containerd, without which no node comes up,
// but which a user may install from elsewhere (the Kubernetes package
// repositories, containerd.io, a tarball), so that a hard dependency
// would refuse a working node; containerd.io is Docker's repositories'
// containerd. Suggests: kubectl. Conflicts: none; kubeboot shares no file
// with another package (it is no kubeadm: a node may hold both).
var (
	debDepends    = []string{"systemd"}
	debRecommends = []string{"kubelet", "containerd | containerd.io"}
	rpmDepends    = []string{"systemd"}
	rpmRecommends = []string{"kubelet", "containerd"}
	suggests      = []string{"kubectl"}
)

// reloadSystemd is the packages' post-install and post-remove script, as
// Debian's debhelper writes for a unit it installs but does not enable:
// systemd rereads its units, so an installed, upgraded or removed
// kubeboot-bootstrap.service is what it runs next; on a machine not
// booted with systemd (an image being built) it does nothing.
const reloadSystemd = `#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
	systemctl --system daemon-reload >/dev/null || true
fi
`

// describeSuffix is what git describe adds to a tag: the commits past it
// and the abbreviated commit.
var describeSuffix = regexp.MustCompile(`-([0-9]+)-g([0-9a-f]+)`)

// untaggedDescribe is git describe --always without a tag: a commit.
var untaggedDescribe = regexp.MustCompile(`^[0-9a-f]{7,40}(-dirty)?$`)

// PackageVersion is a .deb's and an .rpm's version of a git describe
// version, which must begin with a digit and orders releases: v0.4.0 is
// 0.4.0, v0.4.0-3-g1a2b3c4 (past the tag) 0.4.0+3.g1a2b3c4, a tag's
// prerelease (v0.5.0-rc.1) 0.5.0~rc.1, which sorts before 0.5.0, and an
// untagged 1a2b3c4 0.0.0+git.1a2b3c4; -dirty becomes +dirty or .dirty.
func PackageVersion(version string) string {
	v := strings.TrimPrefix(version, "v")
	if untaggedDescribe.MatchString(v) {
		return "0.0.0+git." + strings.ReplaceAll(v, "-", ".")
	}
	var meta []string
	if m := describeSuffix.FindStringSubmatchIndex(v); m != nil {
		meta = append(meta, v[m[2]:m[3]], "g"+v[m[4]:m[5]])
		v = v[:m[0]] + v[m[1]:]
	}
	if rest, ok := strings.CutSuffix(v, "-dirty"); ok {
		v = rest
		meta = append(meta, "dirty")
	}
	v = strings.ReplaceAll(v, "-", "~")
	if len(meta) > 0 {
		v += "+" + strings.Join(meta, ".")
	}
	return v
}

// rpmArch is an architecture's name in an .rpm.
func rpmArch(arch string) string {
	switch arch {
	case "amd64":
		return "x86_64"
	case "arm64":
		return "aarch64"
	}
	return arch
}

// packageName is the file name of a package of format: Debian's and
// Fedora's conventions.
func packageName(format, arch, version string) string {
	v := PackageVersion(version)
	if format == "deb" {
		return fmt.Sprintf("kubeboot_%s-1_%s.deb", v, arch)
	}
	return fmt.Sprintf("kubeboot-%s-1.%s.rpm", v, rpmArch(arch))
}

// packageFiles are what a package of format installs beside the binary,
// by their paths.
func packageFiles(format string, d docs) []namedFile {
	zsh := debZshCompletion
	if format == "rpm" {
		zsh = rpmZshCompletion
	}
	out := []namedFile{
		{UnitPath, []byte(bootstrap.Unit)},
		{bashCompletion, d.bash},
		{fishCompletion, d.fish},
		{zsh, d.zsh},
	}
	for _, m := range d.man {
		out = append(out, namedFile{manDir + m.name, m.data})
	}
	return out
}

// packageInfo is nfpm's description of the package of format for arch:
// the binary at binary and the files of packageFiles, which nfpm reads
// from below staged.
func packageInfo(format, arch, version, binary, staged string, d docs, at time.Time) *nfpm.Info {
	file := func(src, dst string, mode os.FileMode) *files.Content {
		return &files.Content{Source: src, Destination: dst, Type: files.TypeFile,
			FileInfo: &files.ContentFileInfo{Owner: "root", Group: "root", Mode: mode, MTime: at}}
	}
	contents := files.Contents{file(binary, BinaryPath, 0o755)}
	for _, f := range packageFiles(format, d) {
		contents = append(contents, file(filepath.Join(staged, filepath.FromSlash(f.name)), f.name, 0o644))
	}
	info := &nfpm.Info{
		Name:          "kubeboot",
		Arch:          arch,
		Platform:      "linux",
		Version:       PackageVersion(version),
		VersionSchema: "none",
		Release:       "1",
		Section:       "admin",
		Priority:      "optional",
		Maintainer:    "kubeboot maintainers <kubeboot@users.noreply.github.com>",
		Description: "Bootstrap a Kubernetes control plane on this node\n" +
			"kubeboot generates the PKI and kubeconfigs, renders the control-plane static pod\n" +
			"manifests, proves the kubelet will accept them, writes them atomically and waits\n" +
			"until every component is healthy. kubeboot-bootstrap.service, installed but not\n" +
			"enabled, brings a node up unattended from /etc/kubeboot/node.yaml.",
		Vendor:   "kubeboot",
		Homepage: "https://github.com/kubeboot/kubeboot",
		License:  "Apache-2.0",
		MTime:    at,
		Overridables: nfpm.Overridables{
			Suggests: suggests,
			Contents: contents,
			Umask:    0o022,
			RPM:      nfpm.RPM{BuildHost: "kubeboot-release", Group: "System Environment/Base", Summary: "Bootstrap a Kubernetes control plane on this node", Compression: "gzip:9"},
		},
	}
	if format == "deb" {
		info.Depends, info.Recommends = debDepends, debRecommends
	} else {
		info.Depends, info.Recommends = rpmDepends, rpmRecommends
	}
	return info
}

// writePackage writes the .deb or .rpm for arch into out and returns its
// name; the files it holds beside the binary are staged in a temp dir.
func writePackage(out, format, arch, version, binary string, d docs, at time.Time) (string, error) {
	name := packageName(format, arch, version)
	return name, writePackageTo(filepath.Join(out, name), format, arch, version, binary, d, at)
}

// writePackageTo writes the .deb or .rpm for arch at path.
func writePackageTo(path, format, arch, version, binary string, d docs, at time.Time) error {
	staged, err := os.MkdirTemp("", "kubeboot-pkg-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(staged) }()
	for _, f := range packageFiles(format, d) {
		file := filepath.Join(staged, filepath.FromSlash(f.name))
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(file, f.data, 0o644); err != nil {
			return err
		}
	}
	script := filepath.Join(staged, "reload-systemd.sh")
	if err := os.WriteFile(script, []byte(reloadSystemd), 0o755); err != nil {
		return err
	}
	info := packageInfo(format, arch, version, binary, staged, d, at)
	info.Scripts = nfpm.Scripts{PostInstall: script, PostRemove: script}
	info = nfpm.WithDefaults(info)
	if err := nfpm.PrepareForPackager(info, format); err != nil {
		return fmt.Errorf("%s for %s: %w", format, arch, err)
	}
	var packager nfpm.Packager = deb.Default
	if format == "rpm" {
		packager = rpm.DefaultRPM
	}
	if err := writeFile(path, func(w io.Writer) error { return packager.Package(info, w) }); err != nil {
		return fmt.Errorf("%s for %s: %w", format, arch, err)
	}
	return nil
}
