package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

func TestPackageVersion(t *testing.T) {
	for in, want := range map[string]string{
		"v0.4.0":                  "0.4.0",
		"0.4.0":                   "0.4.0",
		"v0.4.0-dirty":            "0.4.0+dirty",
		"v0.4.0-3-g1a2b3c4":       "0.4.0+3.g1a2b3c4",
		"v0.4.0-3-g1a2b3c4-dirty": "0.4.0+3.g1a2b3c4.dirty",
		"v0.5.0-rc.1":             "0.5.0~rc.1",
		"v0.5.0-rc.1-2-gabcdef0":  "0.5.0~rc.1+2.gabcdef0",
		"1a2b3c4":                 "0.0.0+git.1a2b3c4",
		"1a2b3c4-dirty":           "0.0.0+git.1a2b3c4.dirty",
	} {
		if got := PackageVersion(in); got != want {
			t.Errorf("PackageVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestTarballIsSortedAndDated: the members come sorted, each directory
// before what it holds, all root's and of one time, and two writes give
// the same bytes.
func TestTarballIsSortedAndDated(t *testing.T) {
	at := time.Unix(1767225600, 0).UTC()
	files := []member{{"man/man1/b.1.gz", 0o644, []byte("b")}, {"kubeboot", 0o755, []byte("bin")}, {"completions/x", 0o644, []byte("x")}}
	var a, b bytes.Buffer
	if err := writeTarball(&a, "root", files, at); err != nil {
		t.Fatal(err)
	}
	if err := writeTarball(&b, "root", files, at); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("two writes of one tarball differ")
	}
	zr, err := gzip.NewReader(&a)
	if err != nil {
		t.Fatal(err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("gzip header names %q at %v", zr.Name, zr.ModTime)
	}
	var names []string
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(at) || h.Uid != 0 || h.Gid != 0 || h.Uname != "root" || h.Gname != "root" {
			t.Errorf("%s: %v %d:%d %s:%s", h.Name, h.ModTime, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		names = append(names, h.Name)
	}
	want := "root/ root/completions/ root/completions/x root/kubeboot root/man/ root/man/man1/ root/man/man1/b.1.gz"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("members %s, want %s", got, want)
	}
}

// TestDocsAreDated: the man pages carry the release's time, not today's,
// and name the version; the completions are there for the three shells.
func TestDocsAreDated(t *testing.T) {
	root := &cobra.Command{Use: "kubeboot", Short: "Bootstrap"}
	root.AddCommand(&cobra.Command{Use: "init", Short: "Init", Run: func(*cobra.Command, []string) {}})
	at := time.Date(2020, 3, 4, 0, 0, 0, 0, time.UTC)
	d, err := generateDocs(root, "v1.2.3", at)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.man) != 2 || d.man[0].name != "kubeboot-init.1.gz" || d.man[1].name != "kubeboot.1.gz" {
		t.Fatalf("man pages %v", d.man)
	}
	zr, err := gzip.NewReader(bytes.NewReader(d.man[1].data))
	if err != nil {
		t.Fatal(err)
	}
	page, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), `"Mar 2020" "kubeboot v1.2.3"`) {
		t.Errorf("man page header:\n%.300s", page)
	}
	for shell, c := range map[string][]byte{"bash": d.bash, "zsh": d.zsh, "fish": d.fish} {
		if !bytes.Contains(c, []byte("kubeboot")) {
			t.Errorf("%s completion: %.200s", shell, c)
		}
	}
}

// TestSPDXListsModules: every module of the build is a package the
// document describes kubeboot as depending on, with its purl.
func TestSPDXListsModules(t *testing.T) {
	info := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/kubeboot/kubeboot"},
		Deps: []*debug.Module{
			{Path: "github.com/spf13/cobra", Version: "v1.10.2", Sum: "h1:x"},
			{Path: "example.com/old", Version: "v1.0.0", Replace: &debug.Module{Path: "example.com/new", Version: "v1.1.0"}},
		}}
	at := time.Unix(1767225600, 0)
	out, err := spdx(info, "v1.2.3", at)
	if err != nil {
		t.Fatal(err)
	}
	var doc spdxDocument
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.CreationInfo.Created != "2026-01-01T00:00:00Z" || len(doc.Packages) != 4 || len(doc.Relationships) != 4 {
		t.Fatalf("document %s", out)
	}
	cobraPkg := doc.Packages[2]
	if cobraPkg.Name != "github.com/spf13/cobra" || cobraPkg.VersionInfo != "v1.10.2" || cobraPkg.ExternalRefs[0].ReferenceLocator != "pkg:golang/github.com/spf13/cobra@v1.10.2" {
		t.Errorf("cobra: %+v", cobraPkg)
	}
	if replaced := doc.Packages[3]; replaced.VersionInfo != "v1.1.0" || replaced.ExternalRefs[0].ReferenceLocator != "pkg:golang/example.com/new@v1.1.0" {
		t.Errorf("replaced module: %+v", replaced)
	}
	if again, _ := spdx(info, "v1.2.3", at); !bytes.Equal(out, again) {
		t.Error("two SBOMs of one build differ")
	}
}
