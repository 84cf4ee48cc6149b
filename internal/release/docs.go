package release

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// docs are what the release says of kubeboot's commands: the shell
// completions and a man page per command, gzipped (as Debian and Fedora
// install them).
type docs struct {
	bash, zsh, fish []byte
	// man is each man page's file name (kubeboot-init.1.gz) and content,
	// sorted by name.
	man []namedFile
}

// namedFile is a file's name and content.
type namedFile struct {
	name string
	data []byte
}

// generateDocs writes the completions and the man pages of root, dated
// at, which makes them the same on every run.
func generateDocs(root *cobra.Command, version string, at time.Time) (docs, error) {
	var d docs
	root.DisableAutoGenTag = true
	var b bytes.Buffer
	if err := root.GenBashCompletionV2(&b, true); err != nil {
		return d, err
	}
	d.bash = slices.Clone(b.Bytes())
	b.Reset()
	if err := root.GenZshCompletion(&b); err != nil {
		return d, err
	}
	d.zsh = slices.Clone(b.Bytes())
	b.Reset()
	if err := root.GenFishCompletion(&b, true); err != nil {
		return d, err
	}
	d.fish = slices.Clone(b.Bytes())

	dir, err := os.MkdirTemp("", "kubeboot-man-")
	if err != nil {
		return d, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	header := &doc.GenManHeader{Title: "KUBEBOOT", Section: "1", Date: &at, Source: "kubeboot " + version, Manual: "kubeboot Manual"}
	if err := doc.GenManTree(root, header, dir); err != nil {
		return d, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return d, err
	}
	for _, e := range entries { // ReadDir sorts them by name
		page, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return d, err
		}
		gz, err := gzipBytes(page)
		if err != nil {
			return d, err
		}
		d.man = append(d.man, namedFile{e.Name() + ".gz", gz})
	}
	return d, nil
}

// gzipBytes compresses data with a header that names no file and no time.
func gzipBytes(data []byte) ([]byte, error) {
	var b bytes.Buffer
	w, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(data); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
