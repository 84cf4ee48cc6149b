package release

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/kubeboot/kubeboot/internal/bootstrap"
)

// member is one regular file of an archive.
type member struct {
	name string
	mode int64
	data []byte
}

// tarballRoot is the directory a tarball unpacks into.
func tarballRoot(version, arch string) string {
	return fmt.Sprintf("kubeboot_%s_linux_%s", version, arch)
}

// tarballFiles are a tarball's files, below its root: the binary, the
// unit, the completions and the man pages.
func tarballFiles(binary []byte, d docs) []member {
	files := []member{
		{"kubeboot", 0o755, binary},
		{"kubeboot-bootstrap.service", 0o644, []byte(bootstrap.Unit)},
		{"completions/kubeboot.bash", 0o644, d.bash},
		{"completions/_kubeboot", 0o644, d.zsh},
		{"completions/kubeboot.fish", 0o644, d.fish},
	}
	for _, m := range d.man {
		files = append(files, member{"man/man1/" + m.name, 0o644, m.data})
	}
	return files
}

// writeTarball writes a gzipped tar of files under root: members sorted by
// name, each directory before what it holds, every one owned by root and
// dated at, and a gzip header with neither name nor time.
func writeTarball(w io.Writer, root string, files []member, at time.Time) error {
	files = slices.Clone(files)
	slices.SortFunc(files, func(a, b member) int { return strings.Compare(a.name, b.name) })
	gz, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(gz)
	header := func(name string, typ byte, mode, size int64) *tar.Header {
		return &tar.Header{Typeflag: typ, Name: name, Mode: mode, Size: size, ModTime: at,
			Uid: 0, Gid: 0, Uname: "root", Gname: "root", Format: tar.FormatPAX}
	}
	dirs := map[string]bool{}
	var addDir func(dir string) error
	addDir = func(dir string) error {
		if dir == "." || dirs[dir] {
			return nil
		}
		if err := addDir(path.Dir(dir)); err != nil {
			return err
		}
		dirs[dir] = true
		return tw.WriteHeader(header(dir+"/", tar.TypeDir, 0o755, 0))
	}
	for _, f := range files {
		name := path.Join(root, f.name)
		if err := addDir(path.Dir(name)); err != nil {
			return err
		}
		if err := tw.WriteHeader(header(name, tar.TypeReg, f.mode, int64(len(f.data)))); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}
