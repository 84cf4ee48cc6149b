package s3test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestClaimSockets: a pick whose socket path another server holds is
// refused with nothing of it left claimed; a free pick's paths are
// claimed until the test ends.
func TestClaimSockets(t *testing.T) {
	p := pickPorts(t, "127.0.0.1")
	paths := socketPaths(p)
	taken := paths[1] // the volume server's, claimed after the master's
	if err := os.WriteFile(taken, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(taken) })
	if claimSockets(t, p) {
		t.Fatalf("claimed %v although %s was there", paths, taken)
	}
	for _, path := range paths {
		if _, err := os.Stat(path); path != taken && err == nil {
			t.Errorf("%s is left claimed after a refused claim", path)
		}
	}
	if err := os.Remove(taken); err != nil {
		t.Fatal(err)
	}
	t.Run("free", func(t *testing.T) {
		if !claimSockets(t, p) {
			t.Fatalf("refused %v, all free", paths)
		}
		for _, path := range paths {
			if _, err := os.Stat(path); err != nil {
				t.Errorf("not claimed: %v", err)
			}
		}
	})
	for _, path := range paths {
		if _, err := os.Stat(path); err == nil {
			t.Errorf("%s is still there after the test", path)
		}
	}
}

// TestStartUsesOnlyItsOwnFiles: the running server serves its gRPC on the
// socket paths it claimed, writes no log files into /tmp, and leaves
// none of its sockets behind.
func TestStartUsesOnlyItsOwnFiles(t *testing.T) {
	var pid int
	var sockets []string
	t.Run("server", func(t *testing.T) {
		srv := Start(t, Options{})
		pid = serverPID(t, srv.Dir)
		p := serverPorts(t, pid)
		sockets = socketPaths(p)
		for _, path := range sockets {
			if info, err := os.Stat(path); err != nil || info.Mode().Type() != os.ModeSocket {
				t.Errorf("%s: %v, want weed's socket", path, err)
			}
		}
	})
	logs, err := filepath.Glob("/tmp/weed.*." + strconv.Itoa(pid))
	if err != nil || len(logs) > 0 {
		t.Errorf("weed (pid %d) wrote %v in /tmp (%v)", pid, logs, err)
	}
	for _, path := range sockets {
		if _, err := os.Stat(path); err == nil {
			t.Errorf("%s is still there after the server stopped", path)
		}
	}
}

// serverPID is the weed process whose command line names dir.
func serverPID(t *testing.T, dir string) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte("\x00-s3.config="+filepath.Join(dir, "s3.json"))) {
			return pid
		}
	}
	t.Fatalf("no weed process names %s", dir)
	return 0
}

// serverPorts reads the gRPC ports back from weed's command line.
func serverPorts(t *testing.T, pid int) ports {
	t.Helper()
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		t.Fatal(err)
	}
	var p ports
	for _, arg := range bytes.Split(cmdline, []byte{0}) {
		for flag, port := range map[string]*int{"-master.port.grpc=": &p.masterGRPC, "-volume.port.grpc=": &p.volumeGRPC,
			"-filer.port.grpc=": &p.filerGRPC, "-s3.port.grpc=": &p.s3GRPC} {
			if v, ok := bytes.CutPrefix(arg, []byte(flag)); ok {
				if *port, err = strconv.Atoi(string(v)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return p
}
