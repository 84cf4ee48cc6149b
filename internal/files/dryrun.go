package files

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/kubeboot/kubeboot/internal/output"
)

// DryRunWriter writes nothing. It reports each file it would write, prints
// the manifests to stdout, and remembers the content so that later phases
// read what earlier ones would have written.
type DryRunWriter struct {
	// Root prefixes every path read from disk; symlinks resolve inside it.
	Root string
	// Report receives one event per file.
	Report *output.Reporter
	// Stdout receives the manifests.
	Stdout io.Writer
	// Manifests are the node paths of the manifests to print; nothing else
	// is ever printed, so no key can reach stdout.
	Manifests []string
	// KeepOwner is AtomicWriter.KeepOwner: MkdirAll says nothing of
	// their owner.
	KeepOwner []string

	changeLog
	mu      sync.Mutex
	overlay map[string][]byte
}

// HostPath maps a node path under Root, its symlinks resolved inside Root.
func (w *DryRunWriter) HostPath(path string) string { return hostPath(w.Root, path) }

// ReadFile returns what the dry run would have written, else the disk content.
func (w *DryRunWriter) ReadFile(path string) ([]byte, error) {
	w.mu.Lock()
	data, ok := w.overlay[path]
	w.mu.Unlock()
	if ok {
		if data == nil {
			return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
		}
		return data, nil
	}
	return readFile(w.Root, path)
}

// MkdirAll reports only the owner a real run would set back on an
// existing directory: new directories follow from the files.
func (w *DryRunWriter) MkdirAll(path string, _ fs.FileMode) error {
	if slices.Contains(w.KeepOwner, filepath.Clean(path)) {
		return nil
	}
	host, err := resolve(w.Root, path)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(host); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	fixed, err := w.reportOwner(path, host)
	if fixed {
		w.record(path, true)
	}
	return err
}

// reportOwner says whether a real run would give host, the place of the
// node path path, to the running user, and reports it if so.
func (w *DryRunWriter) reportOwner(path, host string) (bool, error) {
	want := running()
	have, err := ownerOf(host)
	if err != nil || have == want {
		return false, err
	}
	w.Report.Event(output.Event{Level: output.LevelInfo, Msg: fmt.Sprintf("would set the owner of %s to %d:%d (now %d:%d)", path, want.uid, want.gid, have.uid, have.gid),
		Fields: map[string]any{"path": path, "uid": want.uid, "gid": want.gid, "wasUid": have.uid, "wasGid": have.gid, "dryRun": true}})
	return true, nil
}

// Chown reports the owner a real run would set.
func (w *DryRunWriter) Chown(path string, uid, gid int) error {
	w.Report.Event(output.Event{Level: output.LevelInfo, Msg: fmt.Sprintf("would set the owner of %s to %d:%d", path, uid, gid),
		Fields: map[string]any{"path": path, "uid": uid, "gid": gid, "dryRun": true}})
	return nil
}

// Remove records that path would be removed.
func (w *DryRunWriter) Remove(path string) error {
	if _, err := w.ReadFile(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	w.remember(path, nil)
	w.Report.Event(output.Event{Level: output.LevelInfo, Msg: "would remove " + path, Fields: map[string]any{"path": path, "dryRun": true}})
	return nil
}

// RemoveAll reports that path and everything under it would be removed.
func (w *DryRunWriter) RemoveAll(path string) error {
	host, err := resolveLink(w.Root, path)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(host); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	w.Report.Event(output.Event{Level: output.LevelInfo, Msg: "would remove " + path + " and everything under it", Fields: map[string]any{"path": path, "dryRun": true}})
	return nil
}

// Rename reports the move it would make, and changes nothing.
func (w *DryRunWriter) Rename(from, to string) error {
	w.Report.Event(output.Event{Level: output.LevelInfo, Msg: "would move " + from + " to " + to, Fields: map[string]any{"path": to, "dryRun": true}})
	return nil
}

// WriteFile records and reports the file; it prints manifests to stdout.
// It refuses what a real run would: a device, FIFO, socket or directory in
// place of the file.
func (w *DryRunWriter) WriteFile(path string, data []byte, mode fs.FileMode) error {
	w.mu.Lock()
	_, planned := w.overlay[path]
	w.mu.Unlock()
	current, err := w.ReadFile(path)
	unchanged := err == nil && bytes.Equal(current, data)
	changed := !unchanged
	if !planned {
		host, err := resolveLink(w.Root, path)
		if err != nil {
			return err
		}
		if err := checkReplaceable(host, path); err != nil {
			return err
		}
		if unchanged {
			if host, err = resolve(w.Root, path); err != nil {
				return err
			}
			if changed, err = w.reportOwner(path, host); err != nil {
				return err
			}
		}
	}
	w.record(path, changed)
	w.remember(path, data)
	verb := "would write"
	if unchanged {
		verb = "unchanged"
	}
	fields := map[string]any{"path": path, "mode": fmt.Sprintf("%04o", mode.Perm()), "size": len(data), "dryRun": true}
	isManifest := slices.Contains(w.Manifests, path)
	if isManifest && w.Report.JSON() {
		fields["content"] = string(data)
	}
	w.Report.Event(output.Event{Level: output.LevelInfo, Msg: fmt.Sprintf("%s %s (%04o, %d bytes)", verb, path, mode.Perm(), len(data)), Fields: fields})
	if isManifest && !w.Report.JSON() {
		if _, err := fmt.Fprintf(w.Stdout, "---\n# %s\n%s", path, ensureNewline(data)); err != nil {
			return fmt.Errorf("print %q: %w", path, err)
		}
	}
	return nil
}

func (w *DryRunWriter) remember(path string, data []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.overlay == nil {
		w.overlay = map[string][]byte{}
	}
	w.overlay[path] = data
}

func ensureNewline(b []byte) string {
	s := string(b)
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return s
}
