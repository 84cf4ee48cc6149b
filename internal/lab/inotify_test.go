package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckInotify: a lab whose nodes fit in what the host's limit leaves
// passes; one that would not is refused, naming the file, the field, the
// numbers and the fix. A control plane and eight workers fit in the
// default limit of 128 on a host that holds none.
func TestCheckInotify(t *testing.T) {
	lab := func(workers int) *Cluster {
		c := &Cluster{source: "lab.yaml", Nodes: []ClusterNode{{Name: "cp1", Role: RoleControlPlane}}}
		for i := range workers {
			c.Nodes = append(c.Nodes, ClusterNode{Name: fmt.Sprintf("w%d", i+1), Role: RoleWorker})
		}
		return c
	}
	for _, tc := range []struct {
		workers, limit, held int
		want                 string
	}{
		{8, 128, 0, ""},
		{2, 128, 60, ""},
		{9, 128, 0, "lab.yaml: nodes: 10 nodes (1 of them control planes) need about 137 inotify instances, and root holds 0 already of the 128 that fs.inotify.max_user_instances allows: raise it"},
		{8, 128, 10, "need about 125 inotify instances, and root holds 10 already"},
		{9, 512, 0, ""},
	} {
		err := lab(tc.workers).checkInotify(tc.limit, tc.held)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%d workers, limit %d, held %d: %v", tc.workers, tc.limit, tc.held, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%d workers, limit %d, held %d: %v, want %q", tc.workers, tc.limit, tc.held, err, tc.want)
		}
	}
}

// TestRootInotifyInstances counts the inotify instances of root's
// processes in a proc tree: not another user's, not other descriptors.
func TestRootInotifyInstances(t *testing.T) {
	proc := t.TempDir()
	process := func(pid, uid string, fds ...string) {
		dir := filepath.Join(proc, pid)
		if err := os.MkdirAll(filepath.Join(dir, "fd"), 0o755); err != nil {
			t.Fatal(err)
		}
		status := "Name:\tx\nUid:\t" + uid + "\t" + uid + "\t" + uid + "\t" + uid + "\n"
		if err := os.WriteFile(filepath.Join(dir, "status"), []byte(status), 0o644); err != nil {
			t.Fatal(err)
		}
		for i, target := range fds {
			if err := os.Symlink(target, filepath.Join(dir, "fd", fmt.Sprint(i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	process("1", "0", "anon_inode:inotify", "anon_inode:inotify", "/dev/null")
	process("42", "0", "socket:[1234]", "anon_inode:inotify")
	process("43", "1000", "anon_inode:inotify")
	process("44", "0", "anon_inode:[eventpoll]")
	if err := os.MkdirAll(filepath.Join(proc, "sys"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := rootInotifyInstances(proc); got != 3 {
		t.Errorf("rootInotifyInstances = %d, want 3", got)
	}
}
