package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kubeboot/kubeboot/files"
)

// The state dir holds
//
//	sandboxes/<id>.json          one sandbox record
//	containers/<id>/state.json   one container record
//	containers/<id>/stdout       the container's output FIFOs (see openOutput)
//	containers/<id>/stderr
//
// Every record is rewritten whole, atomically, after each change, so a
// runtime killed at any moment leaves either the old or the new record.

func (r *Runtime) sandboxPath(id string) string {
	return filepath.Join(r.stateDir, "sandboxes", id+".json")
}

func (r *Runtime) containerDir(id string) string {
	return filepath.Join(r.stateDir, "containers", id)
}

func (r *Runtime) saveSandbox(sb *sandbox) error {
	return writeJSON(r.sandboxPath(sb.ID), sb)
}

func (r *Runtime) deleteSandbox(sb *sandbox) error {
	if err := os.Remove(r.sandboxPath(sb.ID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("delete sandbox state %q: %w", sb.ID, err)
	}
	return nil
}

func (r *Runtime) saveContainer(c *container) error {
	dir := r.containerDir(c.ID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("save container state %q: %w", c.ID, err)
	}
	return writeJSON(filepath.Join(dir, "state.json"), c)
}

func (r *Runtime) deleteContainer(c *container) error {
	if err := os.RemoveAll(r.containerDir(c.ID)); err != nil {
		return fmt.Errorf("delete container state %q: %w", c.ID, err)
	}
	return nil
}

// writeJSON replaces the file at path with v as JSON.
func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode state %q: %w", path, err)
	}
	if err := writeAtomic(path, data); err != nil {
		return fmt.Errorf("write state %q: %w", path, err)
	}
	return nil
}

// writeAtomic replaces the file at path with data through kubeboot's one
// atomic writer: a reader never sees it half-written, and a crash leaves
// the old or the new file, with the directory entry synced too.
func writeAtomic(path string, data []byte) error {
	return (&files.AtomicWriter{}).WriteFile(path, data, 0o600)
}

// readJSON decodes the state file at path into v.
func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read state %q: %w", path, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decode state %q: %w", path, err)
	}
	return nil
}

// load reads the state a previous runtime left and settles every container
// that was running: see recoverContainer.
func (r *Runtime) load() error {
	for _, dir := range []string{"sandboxes", "containers"} {
		if err := os.MkdirAll(filepath.Join(r.stateDir, dir), 0o700); err != nil {
			return fmt.Errorf("create state dir %q: %w", r.stateDir, err)
		}
	}
	sandboxFiles, err := filepath.Glob(filepath.Join(r.stateDir, "sandboxes", "*.json"))
	if err != nil {
		return fmt.Errorf("list sandbox state in %q: %w", r.stateDir, err)
	}
	for _, path := range sandboxFiles {
		if strings.HasPrefix(filepath.Base(path), ".") {
			continue // a temp file a killed runtime left behind
		}
		sb := &sandbox{}
		if err := readJSON(path, sb); err != nil {
			return err
		}
		r.sandboxes[sb.ID] = sb
	}
	containerFiles, err := filepath.Glob(filepath.Join(r.stateDir, "containers", "*", "state.json"))
	if err != nil {
		return fmt.Errorf("list container state in %q: %w", r.stateDir, err)
	}
	for _, path := range containerFiles {
		c := &container{}
		if err := readJSON(path, c); err != nil {
			return err
		}
		if err := r.recoverContainer(c); err != nil {
			return err
		}
		r.containers[c.ID] = c
	}
	return nil
}

// recoverContainer settles a container loaded from the state dir.
//
// A container whose process still runs (same pid and start time) is
// running: the runtime reopens its output FIFOs and goes on copying its
// output. It is not this runtime's child, so its exit is noticed by polling
// /proc, and its exit code is unknown (exitUnknown, reason "Unknown").
//
// A container that was running but whose process is gone is exited with the
// same unknown exit code, finished at load time, which is the earliest time
// the runtime knows it to be gone.
func (r *Runtime) recoverContainer(c *container) error {
	if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return nil
	}
	if !alive(c.PID, c.StartTicks) {
		c.State = runtimeapi.ContainerState_CONTAINER_EXITED
		c.ExitCode, c.Reason, c.FinishedAt = exitUnknown, "Unknown", time.Now().UnixNano()
		c.Message = "the process exited while no runtime was running; its exit code is unknown"
		r.logf("container %.13s: pid %d exited while no runtime was running", c.ID, c.PID)
		return r.saveContainer(c)
	}
	logs, err := openLogFile(c.LogPath, r.logf)
	if err != nil {
		r.logf("container %.13s: %v; discarding its output", c.ID, err)
		logs, _ = openLogFile("", r.logf)
	}
	// Without its FIFOs (deleted by hand?) the output of a stream is lost,
	// and the process blocks once that pipe is full.
	var outputs [2]*os.File
	for i, stream := range []string{"stdout", "stderr"} {
		if outputs[i], err = openOutputReader(filepath.Join(r.containerDir(c.ID), stream)); err != nil {
			r.logf("container %.13s: %v", c.ID, err)
		}
	}
	c.proc = &process{done: make(chan struct{}), logs: logs}
	for _, f := range outputs {
		if f != nil {
			c.proc.outputs = append(c.proc.outputs, f)
		}
	}
	copied := copyOutput(outputs[0], outputs[1], logs)
	go r.watch(c, copied)
	r.logf("container %.13s: reattached to running pid %d", c.ID, c.PID)
	return nil
}
