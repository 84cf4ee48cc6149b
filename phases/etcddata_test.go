package phases

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/kubeboot/kubeboot/internal/output"
)

func TestLookupUser(t *testing.T) {
	passwd := []byte("root:x:0:0:root:/root:/bin/bash\netcdx:x:7:7::/:/bin/false\netcd:x:998:997:etcd:/var/lib/etcd:/usr/sbin/nologin\nbad:x:one:2::/:\n")
	tests := []struct {
		name     string
		uid, gid int
		ok       bool
	}{{"etcd", 998, 997, true}, {"root", 0, 0, true}, {"etc", 0, 0, false}, {"bad", 0, 0, false}, {"nobody", 0, 0, false}}
	for _, tt := range tests {
		uid, gid, ok := lookupUser(passwd, tt.name)
		if uid != tt.uid || gid != tt.gid || ok != tt.ok {
			t.Errorf("%s: got %d, %d, %v", tt.name, uid, gid, ok)
		}
	}
}

// ownerOf returns a host path's mode and owner.
func ownerOf(t *testing.T, path string) (fs.FileMode, uint32, uint32) {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := info.Sys().(*syscall.Stat_t)
	return info.Mode(), st.Uid, st.Gid
}

func TestEtcdDataDirModeAndOwner(t *testing.T) {
	// Only root may give a directory away; others can test with their own IDs.
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		uid, gid = 4242, 4343
	}
	s := manifestState(t, t.TempDir(), "v1.36.3")
	dir := s.Config.Etcd.Local.DataDir
	writeHostFile(t, s, passwdFile, fmt.Sprintf("root:x:0:0::/root:/bin/sh\netcd:x:%d:%d::/var/lib/etcd:/usr/sbin/nologin\n", uid, gid))
	must(t, os.MkdirAll(s.Files.HostPath(dir), 0o755))
	must(t, renderAndWrite(s))
	mode, u, g := ownerOf(t, s.Files.HostPath(dir))
	if mode != fs.ModeDir|0o700 || int(u) != uid || int(g) != gid {
		t.Errorf("data dir: mode %v owner %d:%d, want drwx------ %d:%d", mode, u, g, uid, gid)
	}
}

func TestEtcdDataDirWithoutTheUserWarns(t *testing.T) {
	var events bytes.Buffer
	s := manifestState(t, t.TempDir(), "v1.36.3")
	s.Report = output.NewReporter(&events, false)
	writeHostFile(t, s, passwdFile, "root:x:0:0::/root:/bin/sh\n")
	must(t, renderAndWrite(s))
	mode, u, _ := ownerOf(t, s.Files.HostPath(s.Config.Etcd.Local.DataDir))
	if mode != fs.ModeDir|0o700 || int(u) != os.Getuid() {
		t.Errorf("data dir: mode %v owner %d", mode, u)
	}
	if !strings.Contains(events.String(), `WARNING: no user "etcd" in /etc/passwd`) {
		t.Errorf("want a warning about the missing user, got:\n%s", events.String())
	}

	// Owned by root on purpose: no warning.
	events.Reset()
	s.Config.Security.EtcdDataDirOwner = "root"
	must(t, renderAndWrite(s))
	if strings.Contains(events.String(), "WARNING") {
		t.Errorf("owner root must not warn:\n%s", events.String())
	}
}

// TestEtcdDataDirOffline: an offline render cannot know the node's user
// IDs, so it creates the directory and sets no owner.
func TestEtcdDataDirOffline(t *testing.T) {
	var events bytes.Buffer
	s := manifestState(t, t.TempDir(), "v1.36.3")
	s.Options.Offline = true
	s.Report = output.NewReporter(&events, false)
	writeHostFile(t, s, passwdFile, "etcd:x:4242:4242::/:/bin/false\n")
	must(t, renderAndWrite(s))
	mode, u, _ := ownerOf(t, s.Files.HostPath(s.Config.Etcd.Local.DataDir))
	if mode != fs.ModeDir|0o700 || int(u) != os.Getuid() || strings.Contains(events.String(), "WARNING") {
		t.Errorf("offline: mode %v owner %d, events:\n%s", mode, u, events.String())
	}
}
