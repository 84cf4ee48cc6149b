package lab_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/internal/lab"
	"github.com/kubeboot/kubeboot/internal/testsupport"
)

// TestExportLogsOfALabDown: the export of a lab whose machines are not
// running still gives one archive, in the directory asked for, with the
// pods' logs the nodes' disks hold and, for what could not be collected
// (the journals, the API server's dumps), an errors.txt that says why;
// nothing else is left in the directory.
func TestExportLogsOfALabDown(t *testing.T) {
	labDir := t.TempDir()
	c, err := lab.LoadCluster(writeDescription(t, strings.Replace(header, "/tmp/kb-lab", labDir, 1)+
		"subnet: 10.89.0.0/24\npodSubnet: 10.245.0.0/16\nnodes: [{name: cp1, role: control-plane}, {name: w1, role: worker}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	podLog := filepath.Join(labDir, "w1/root/var/log/pods/default_web-1_uid/web/0.log")
	if err := os.MkdirAll(filepath.Dir(podLog), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(podLog, []byte("GET / 200\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "logs")
	path, err := lab.Lab{Cluster: c, BinDir: "/bin-dir"}.ExportLogs(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(path) != out || !strings.HasPrefix(filepath.Base(path), "kubeboot-lab-lab-") || !strings.HasSuffix(path, ".tar.gz") {
		t.Errorf("the archive is %s, want kubeboot-lab-lab-<time>.tar.gz in %s", path, out)
	}
	if left, _ := os.ReadDir(out); len(left) != 1 {
		t.Errorf("%s holds %d entries, want the archive alone", out, len(left))
	}
	files := testsupport.ReadTarGz(t, path)
	base := strings.TrimSuffix(filepath.Base(path), ".tar.gz")
	if got := files[base+"/w1/var/log/pods/default_web-1_uid/web/0.log"]; got != "GET / 200\n" {
		t.Errorf("w1's pod log: %q; the archive holds %v", got, keys(files))
	}
	for _, errs := range []string{base + "/cp1/errors.txt", base + "/w1/errors.txt", base + "/cluster/errors.txt"} {
		if !strings.Contains(files[errs], "is not running") {
			t.Errorf("%s: %q, want why nothing was collected", errs, files[errs])
		}
	}
}

// downLab is a lab of cp1 and w1, not running, whose disks are in a temp
// dir, which it returns.
func downLab(t *testing.T) (lab.Lab, string) {
	t.Helper()
	labDir := t.TempDir()
	c, err := lab.LoadCluster(writeDescription(t, strings.Replace(header, "/tmp/kb-lab", labDir, 1)+
		"subnet: 10.89.0.0/24\npodSubnet: 10.245.0.0/16\nnodes: [{name: cp1, role: control-plane}, {name: w1, role: worker}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	return lab.Lab{Cluster: c, BinDir: "/bin-dir"}, labDir
}

// TestExportLogsStaysInTheNodesDisk: a symlink in a node's disk that
// leads out of it, absolute (which the host would resolve against its own
// root) or relative, is not followed: the host's files stay out of the
// archive, and errors.txt says why the node's logs are missing.
func TestExportLogsStaysInTheNodesDisk(t *testing.T) {
	l, labDir := downLab(t)
	host := t.TempDir()
	writeLog := func(path, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeLog(filepath.Join(host, "log/pods/kube-system_etcd_uid/etcd/0.log"), "HOST SECRET\n")
	writeLog(filepath.Join(labDir, "cp1/root/var/log/pods/default_web-1_uid/web/0.log"), "GET / 200\n")
	for link, target := range map[string]string{
		"w1/root/var/log": filepath.Join(host, "log"),
		"cp1/root/var/log/pods/default_web-1_uid/escape": "../../../../../../../../" + host + "/log/pods",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(labDir, link)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(labDir, link)); err != nil {
			t.Fatal(err)
		}
	}
	path, err := l.ExportLogs(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	files := testsupport.ReadTarGz(t, path)
	for name, data := range files {
		if strings.Contains(data, "HOST SECRET") {
			t.Errorf("the archive holds the host's file as %s", name)
		}
	}
	base := strings.TrimSuffix(filepath.Base(path), ".tar.gz")
	if got := files[base+"/cp1/var/log/pods/default_web-1_uid/web/0.log"]; got != "GET / 200\n" {
		t.Errorf("cp1's pod log: %q; the archive holds %v", got, keys(files))
	}
	if got := files[base+"/w1/errors.txt"]; !strings.Contains(got, "the pods' logs in "+filepath.Join(labDir, "w1/root/var/log/pods")) || !strings.Contains(got, "escapes") {
		t.Errorf("w1's errors.txt: %q, want why its pods' logs are missing", got)
	}
}

// TestExportLogsTwiceInASecond: exports in a row each give an archive of
// their own: none replaces another.
func TestExportLogsTwiceInASecond(t *testing.T) {
	l, _ := downLab(t)
	out := t.TempDir()
	paths := map[string]bool{}
	for range 3 {
		path, err := l.ExportLogs(context.Background(), out)
		if err != nil {
			t.Fatal(err)
		}
		paths[path] = true
	}
	if left, _ := os.ReadDir(out); len(paths) != 3 || len(left) != 3 {
		t.Errorf("3 exports gave %d paths and left %d files, want 3 archives", len(paths), len(left))
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
