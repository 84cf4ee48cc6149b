package lab_test

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/lab"
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
	path, err := lab.MachineLab{Cluster: c, BinDir: "/bin-dir"}.ExportLogs(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(path) != out || !strings.HasPrefix(filepath.Base(path), "kubeboot-lab-lab-") || !strings.HasSuffix(path, ".tar.gz") {
		t.Errorf("the archive is %s, want kubeboot-lab-lab-<time>.tar.gz in %s", path, out)
	}
	if left, _ := os.ReadDir(out); len(left) != 1 {
		t.Errorf("%s holds %d entries, want the archive alone", out, len(left))
	}
	files := readTarGz(t, path)
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

// readTarGz is a gzipped tar file's regular files' contents by name.
func readTarGz(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = string(data)
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
