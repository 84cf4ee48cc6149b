package hostile

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/testsupport"
)

// labDescription writes the description of a lab of cp1 and w1, not
// running, whose disks are under the row's lab/.
func labDescription(e env) string {
	e.t.Helper()
	path := e.path("cluster.yaml")
	writeFile(e.t, path, "apiVersion: kubeboot.io/v1alpha1\nkind: LabCluster\nname: lab\ndir: "+e.path("lab")+"\n"+
		"subnet: 10.89.0.0/24\npodSubnet: 10.245.0.0/16\nnodes: [{name: cp1, role: control-plane}, {name: w1, role: worker}]\n", 0o600)
	return path
}

// imageArchive writes a `docker save` archive whose manifest.json is
// manifest.
func imageArchive(e env, name, manifest string) string {
	e.t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: "manifest.json", Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(manifest))}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := io.WriteString(tw, manifest); err != nil {
		e.t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		e.t.Fatal(err)
	}
	path := e.path(name)
	writeFile(e.t, path, b.String(), 0o600)
	return path
}

// loadFromPipe runs kubeboot with a pipe as its fd 3, as bash's
// <(docker save ...) gives, into which an endless archive is written.
func loadFromPipe(e env, args []string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, w, err := os.Pipe()
	if err != nil {
		e.t.Fatal(err)
	}
	cmd, stdout, stderr := command(ctx, e.dir, args...)
	cmd.ExtraFiles = []*os.File{r}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	_ = r.Close()
	go func() {
		defer func() { _ = w.Close() }()
		tw := tar.NewWriter(w)
		for i := 0; ; i++ {
			if tw.WriteHeader(&tar.Header{Name: "blobs/layer", Mode: 0o644, Typeflag: tar.TypeReg, Size: 512}) != nil {
				return
			}
			if _, err := tw.Write(make([]byte, 512)); err != nil {
				return
			}
		}
	}()
	err = cmd.Wait()
	_ = w.Close()
	return finish(e.t, cmd, err, stdout, stderr, time.Since(start))
}

// outsidePathRows are the class 4: paths and keys from outside
// are resolved inside their root or refused, and archives are read as
// regular files of bounded size.
var outsidePathRows = []row{
	{
		defect: "4", name: "etcd restore from an s3:// key with ..",
		setup: func(e env) []string {
			c := e.config("c.yaml", "etcd: {local: {scheduledSnapshots: {s3: {endpoint: 'https://s3.example.com', bucket: backups, credentialsFile: /etc/kubeboot/s3-credentials}}}}\n")
			return []string{"etcd", "restore", "--config", c, "--snapshot", "s3://backups/cp1/../../other-bucket/etcd-snapshot-20260101T000000.000Z.db"}
		},
		code: 2, message: `key "cp1/../../other-bucket/etcd-snapshot-20260101T000000.000Z.db" has an empty, . or .. part`,
	},
	{
		defect: "4", name: "lab load of a FIFO nobody writes to fails at once",
		setup: func(e env) []string {
			mkfifo(e.t, e.path("images.tar"))
			return []string{"lab", "load", "--cluster", labDescription(e), e.path("images.tar")}
		},
		code: 2, message: "not a regular file: it is a FIFO (named pipe): lab load reads an archive more than once, so save it to a file first", within: 10 * time.Second,
	},
	{
		defect: "4", name: "lab load <(docker save ...) fails at once",
		setup: func(e env) []string { return []string{"lab", "load", "--cluster", labDescription(e), "/dev/fd/3"} },
		run:   loadFromPipe,
		code:  2, message: `image archive: read "/dev/fd/3": not a regular file: it is a FIFO (named pipe): lab load reads an archive more than once, so save it to a file first (` + "`docker save -o app.tar IMAGE`)", within: 10 * time.Second,
	},
	{
		defect: "4", name: "lab load of an archive with a 64 MiB manifest.json",
		setup: func(e env) []string {
			manifest := "[" + strings.Repeat("{},", 64<<20/3) + "{}]"
			return []string{"lab", "load", "--cluster", labDescription(e), imageArchive(e, "images.tar", manifest)}
		},
		code: 2, message: "its manifest.json has 67108867 bytes, more than the 4 MiB an index of thousands of images takes", within: 10 * time.Second,
	},
	{
		defect: "4", name: "lab export logs keeps to the node's disk past an absolute symlink",
		setup: func(e env) []string {
			writeFile(e.t, e.path("host/log/pods/kube-system_etcd_uid/etcd/0.log"), "HOST SECRET\n", 0o600)
			if err := os.MkdirAll(e.path("lab/w1/root/var"), 0o755); err != nil {
				e.t.Fatal(err)
			}
			if err := os.Symlink(e.path("host/log"), e.path("lab/w1/root/var/log")); err != nil {
				e.t.Fatal(err)
			}
			return []string{"lab", "export", "logs", "--cluster", labDescription(e), e.path("out")}
		},
		code: 0, allowed: []string{"/out"},
		check: func(e env, res result) {
			files := testsupport.ReadTarGz(e.t, strings.TrimSpace(res.stdout))
			for name, data := range files {
				if strings.Contains(data, "HOST SECRET") {
					e.t.Errorf("the archive holds the host's file as %s", name)
				}
			}
		},
	},
	{
		defect: "4", name: "lab export logs twice in a second keeps both archives",
		setup: func(e env) []string {
			return []string{"lab", "export", "logs", "--cluster", labDescription(e), e.path("out")}
		},
		run: func(e env, args []string) result {
			if res := run(e.t, e.dir, args...); res.code != 0 {
				return res
			}
			return run(e.t, e.dir, args...)
		},
		code: 0, allowed: []string{"/out"},
		check: func(e env, _ result) {
			if archives, _ := filepath.Glob(e.path("out/kubeboot-lab-lab-*.tar.gz")); len(archives) != 2 {
				e.t.Errorf("two exports left %v, want two archives", archives)
			}
		},
	},
}

func TestOutsidePaths(t *testing.T) { runRows(t, outsidePathRows) }
