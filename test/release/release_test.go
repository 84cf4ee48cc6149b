// Package release tests make release's product as a user gets it: the
// release is built twice by cmd/kubeboot-release, as make release builds
// it, and the two must be identical; the packages are read by Debian's
// dpkg-deb and rpm, and the binaries they hold run.
package release

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/internal/testsupport"
)

// version is the release's version in the test: a tag's, as git describe
// gives it on a tagged commit.
const version = "v1.2.3"

// epoch is the release's SOURCE_DATE_EPOCH: a commit's time.
const epoch = "1767225600" // 2026-01-01T00:00:00Z

// need finds tool or, under CI, fails: CI installs it (.ci/run).
func need(t *testing.T, tool string) string {
	t.Helper()
	path, err := exec.LookPath(tool)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing (.ci/run installs it; make host-packages too): %v", tool, err)
		}
		t.Skipf("%s is missing: %v", tool, err)
	}
	return path
}

// run runs a command and returns its stdout, failing the test if it fails.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, stdout.String(), testsupport.LastLines(stderr.String(), 20))
	}
	return stdout.String()
}

// TestReleaseIsReproducible: two releases of one tree are byte for byte the
// same, SHA256SUMS names every file with its sum, the packages hold the
// binary, the unit (installed, not enabled), the completions and man pages
// with the relations a user needs, the SBOM lists the modules compiled in,
// and the packaged binaries say the version: amd64's on this machine,
// arm64's under qemu-user-static.
func TestReleaseIsReproducible(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("the release is built and its amd64 binary run on linux/amd64")
	}
	dpkgDeb, rpm := need(t, "dpkg-deb"), need(t, "rpm")
	// go test puts its own go first in the PATH.
	goCmd := need(t, "go")
	source, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	tool := filepath.Join(t.TempDir(), "kubeboot-release")
	run(t, source, nil, goCmd, "build", "-o", tool, "./cmd/kubeboot-release")
	var dists [2]string
	for i := range dists {
		dists[i] = filepath.Join(t.TempDir(), "dist")
		run(t, source, []string{"SOURCE_DATE_EPOCH=" + epoch}, tool, "--out", dists[i], "--version", version)
	}
	sums := [2][]byte{}
	for i, dist := range dists {
		if sums[i], err = os.ReadFile(filepath.Join(dist, "SHA256SUMS")); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(sums[0], sums[1]) {
		t.Fatalf("two releases of one tree differ:\n%s\n%s", sums[0], sums[1])
	}
	t.Logf("SHA256SUMS of both runs:\n%s", sums[0])

	dist := dists[0]
	want := []string{
		"kubeboot-1.2.3-1.aarch64.rpm", "kubeboot-1.2.3-1.x86_64.rpm",
		"kubeboot_1.2.3-1_amd64.deb", "kubeboot_1.2.3-1_arm64.deb",
		"kubeboot_v1.2.3.spdx.json",
		"kubeboot_v1.2.3_linux_amd64.tar.gz", "kubeboot_v1.2.3_linux_arm64.tar.gz",
	}
	var named []string
	for line := range strings.Lines(string(sums[0])) {
		sum, name, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q", line)
		}
		data, err := os.ReadFile(filepath.Join(dist, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != sum {
			t.Errorf("SHA256SUMS: %s is not %s", name, sum)
		}
		named = append(named, name)
	}
	if strings.Join(named, " ") != strings.Join(want, " ") {
		t.Errorf("SHA256SUMS names %q, want %q", named, want)
	}
	entries, err := os.ReadDir(dist)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(want)+1 {
		t.Errorf("dist holds %d files, want %d and SHA256SUMS", len(entries), len(want))
	}

	installed := []string{"/usr/bin/kubeboot", "/usr/lib/systemd/system/kubeboot-bootstrap.service",
		"/usr/share/bash-completion/completions/kubeboot", "/usr/share/fish/vendor_completions.d/kubeboot.fish",
		"/usr/share/man/man1/kubeboot.1.gz", "/usr/share/man/man1/kubeboot-init.1.gz"}
	for _, deb := range []string{"kubeboot_1.2.3-1_amd64.deb", "kubeboot_1.2.3-1_arm64.deb"} {
		path := filepath.Join(dist, deb)
		contents := run(t, "", nil, dpkgDeb, "-c", path)
		for _, f := range append(installed, "/usr/share/zsh/vendor-completions/_kubeboot") {
			if !strings.Contains(contents, " ."+f+"\n") {
				t.Errorf("dpkg-deb -c %s lists no %s:\n%s", deb, f, contents)
			}
		}
		// Installed, not enabled: nothing links the unit into a target,
		// and the maintainer scripts only make systemd reread its units.
		if strings.Contains(contents, ".wants/") {
			t.Errorf("%s enables a unit:\n%s", deb, contents)
		}
		for _, script := range []string{"postinst", "postrm"} {
			checkScript(t, deb+" "+script, run(t, "", nil, dpkgDeb, "-I", path, script))
		}
		control := run(t, "", nil, dpkgDeb, "-f", path, "Version", "Depends", "Recommends", "Conflicts")
		if control != "Version: 1.2.3-1\nDepends: systemd\nRecommends: kubelet, containerd | containerd.io\n" {
			t.Errorf("%s control fields:\n%s", deb, control)
		}
	}
	for _, r := range []string{"kubeboot-1.2.3-1.x86_64.rpm", "kubeboot-1.2.3-1.aarch64.rpm"} {
		path := filepath.Join(dist, r)
		contents := run(t, "", nil, rpm, "-qpl", path)
		for _, f := range append(installed, "/usr/share/zsh/site-functions/_kubeboot") {
			if !strings.Contains("\n"+contents, "\n"+f+"\n") {
				t.Errorf("rpm -qpl %s lists no %s:\n%s", r, f, contents)
			}
		}
		checkScript(t, r+"'s scripts", run(t, "", nil, rpm, "-qp", "--scripts", path))
		if requires := run(t, "", nil, rpm, "-qpR", path); !strings.Contains(requires, "systemd\n") {
			t.Errorf("%s requires:\n%s", r, requires)
		}
	}

	var sbom struct {
		SPDXVersion string `json:"spdxVersion"`
		Packages    []struct {
			Name        string `json:"name"`
			VersionInfo string `json:"versionInfo"`
		} `json:"packages"`
	}
	data, err := os.ReadFile(filepath.Join(dist, "kubeboot_v1.2.3.spdx.json"))
	if err != nil || json.Unmarshal(data, &sbom) != nil || sbom.SPDXVersion != "SPDX-2.3" {
		t.Fatalf("SBOM: %v\n%.400s", err, data)
	}
	modules := map[string]string{}
	for _, p := range sbom.Packages {
		modules[p.Name] = p.VersionInfo
	}
	for _, m := range []string{"github.com/spf13/cobra", "k8s.io/client-go", "go.etcd.io/etcd/client/v3", "github.com/cloudflare/cfssl"} {
		if modules[m] == "" {
			t.Errorf("SBOM lists no %s", m)
		}
	}
	if _, ok := modules["github.com/goreleaser/nfpm/v2"]; ok {
		t.Error("SBOM lists nfpm, which builds the packages and is not in kubeboot")
	}

	// The packaged binaries run and say the version: the .deb's on this
	// machine, the arm64 tarball's under qemu.
	unpacked := t.TempDir()
	run(t, "", nil, dpkgDeb, "-x", filepath.Join(dist, "kubeboot_1.2.3-1_amd64.deb"), unpacked)
	if out := run(t, "", nil, filepath.Join(unpacked, "usr/bin/kubeboot"), "version"); !strings.HasPrefix(out, "kubeboot v1.2.3 (") || !strings.Contains(out, "linux/amd64") {
		t.Errorf("the .deb's kubeboot version: %q", out)
	}
	t.Run("arm64 under qemu", func(t *testing.T) {
		qemu := need(t, "qemu-aarch64-static")
		files := testsupport.ReadTarGz(t, filepath.Join(dist, "kubeboot_v1.2.3_linux_arm64.tar.gz"))
		bin := filepath.Join(t.TempDir(), "kubeboot")
		if err := os.WriteFile(bin, []byte(files["kubeboot_v1.2.3_linux_arm64/kubeboot"]), 0o755); err != nil {
			t.Fatal(err)
		}
		out := run(t, "", nil, qemu, bin, "version")
		if !strings.HasPrefix(out, "kubeboot v1.2.3 (") || !strings.Contains(out, "linux/arm64") {
			t.Errorf("qemu-aarch64-static kubeboot version: %q", out)
		}
		t.Logf("arm64 under qemu: %s", out)
	})
}

// checkScript wants a package's maintainer script to make a running
// systemd reread its units (daemon-reload, as debhelper's do), so that an
// upgraded kubeboot-bootstrap.service is the one it runs, and never to
// enable, start or stop a unit: enabling the unit is the node's choice.
func checkScript(t *testing.T, what, script string) {
	t.Helper()
	if !strings.Contains(script, "systemctl --system daemon-reload") {
		t.Errorf("%s does not reload systemd:\n%s", what, script)
	}
	for _, verb := range []string{" enable", " start", " restart", " stop"} {
		if strings.Contains(script, verb) {
			t.Errorf("%s runs systemctl%s:\n%s", what, verb, script)
		}
	}
}
