package lab

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/kubeboot/kubeboot/internal/atomicfile"
	"github.com/kubeboot/kubeboot/internal/inputfile"
	"github.com/kubeboot/kubeboot/internal/machine"
)

// podLogLimit caps one pod log file ExportLogs reads: the kubelet rotates
// a container's log at 10 MiB (containerLogMaxSize's default), so a
// larger file is no log it wrote, and is left out, said in errors.txt.
const podLogLimit = 64 << 20

// nodeLogUnits are the services whose journals ExportLogs writes apart,
// besides the node's whole journal.
var nodeLogUnits = []string{"kubelet", "containerd", installUnit, "kubeboot-bootstrap"}

// clusterDumps are the `kubectl get` dumps ExportLogs takes through the
// first control-plane node, by file name.
var clusterDumps = []struct {
	file string
	args []string
}{
	{"nodes.txt", []string{"get", "nodes", "-o", "wide"}},
	{"pods.txt", []string{"get", "pods", "-A", "-o", "wide"}},
	{"events.txt", []string{"get", "events", "-A", "--sort-by=.lastTimestamp"}},
	{"objects.yaml", []string{"get", "nodes,pods,services,endpointslices,deployments,daemonsets,replicasets", "-A", "-o", "yaml"}},
}

// ExportLogs collects what a report of a lab's trouble needs into one
// gzipped tar file in dir, and returns its path: for every node its whole
// journal and, apart, the kubelet's, containerd's and kubeboot's units',
// and its pods' logs (/var/log/pods, read inside the node's disk: a
// symlink that leads out of it is not followed); from the first
// control-plane node, `kubectl get` dumps of the nodes, pods, events and
// workloads. What could not be collected (a node that is not running, the
// API server down) is written as <node>/errors.txt rather than ending the
// export. The file, named for the time to the microsecond, appears whole
// or not at all, and never replaces another.
func (l Lab) ExportLogs(ctx context.Context, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("export logs: %w", err)
	}
	base := fmt.Sprintf("kubeboot-lab-%s-%s", l.Cluster.Name, time.Now().UTC().Format("20060102-150405.000000"))
	path := filepath.Join(dir, base+".tar.gz")
	// The archive is written in a temp file beside path and linked at path
	// once whole: a link, unlike a rename, fails rather than replace a file.
	// Its mode is 0600: it holds the nodes' logs.
	f, err := atomicfile.Create(path, 0o600)
	if err != nil {
		return "", fmt.Errorf("export logs: %w", err)
	}
	defer f.Abort()
	zw := gzip.NewWriter(f)
	a := &logArchive{tw: tar.NewWriter(zw), base: base}
	for i := range l.Cluster.Nodes {
		l.exportNode(ctx, a, l.machine(i))
	}
	l.exportCluster(ctx, a)
	err = a.err
	for _, closer := range []func() error{a.tw.Close, zw.Close} {
		if cerr := closer(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = f.CommitNew()
	}
	if errors.Is(err, fs.ErrExist) {
		err = fmt.Errorf("%w: an export of the same microsecond is there; it is kept, run the export again", err)
	}
	if err != nil {
		return "", fmt.Errorf("export logs to %s: %w", path, err)
	}
	return path, nil
}

// exportNode adds a node's journals and pods' logs.
func (l Lab) exportNode(ctx context.Context, a *logArchive, m machine.Machine) {
	var problems []string
	journal := func(file string, args ...string) {
		out, err := m.Output(ctx, append([]string{"journalctl", "--no-pager", "-o", "short-precise"}, args...)...)
		if err != nil {
			problems = append(problems, err.Error())
			return
		}
		a.add(m.Name+"/"+file, out)
	}
	journal("journal.log")
	for _, unit := range nodeLogUnits {
		journal(unit+".log", "-u", unit)
	}
	if err := exportPodLogs(a, m); err != nil {
		problems = append(problems, fmt.Sprintf("the pods' logs in %s: %v", filepath.Join(m.Root(), podLogs), err))
	}
	if len(problems) > 0 {
		a.add(m.Name+"/errors.txt", []byte(strings.Join(problems, "\n")+"\n"))
	}
}

// podLogs is where a node's kubelet writes the pods' logs, in its disk.
const podLogs = "var/log/pods"

// exportPodLogs adds the regular files under the node's podLogs, each at
// most podLogLimit bytes, read inside the node's disk: a symlink that
// leads out of it (any absolute one, which the host would resolve against
// its own root) is an error, never followed. A file that cannot be read
// is said in the archive's errors.txt through the returned error; the
// walk goes on.
func exportPodLogs(a *logArchive, m machine.Machine) error {
	root, err := os.OpenRoot(m.Root())
	if err != nil {
		return err
	}
	defer func() { _ = root.Close() }()
	var errs []error
	err = fs.WalkDir(root.FS(), podLogs, func(name string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		// O_NONBLOCK: a FIFO swapped in after the walk cannot hang the open.
		f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		defer func() { _ = f.Close() }()
		data, err := inputfile.ReadFile(f, name, podLogLimit)
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		a.add(m.Name+"/"+name, data)
		return nil
	})
	return errors.Join(append(errs, err)...)
}

// exportCluster adds the `kubectl get` dumps, through the first
// control-plane node's admin.conf.
func (l Lab) exportCluster(ctx context.Context, a *logArchive) {
	var problems []string
	for _, d := range clusterDumps {
		out, err := kubectl(ctx, l.machine(0), d.args...)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		a.add("cluster/"+d.file, out)
	}
	if len(problems) > 0 {
		a.add("cluster/errors.txt", []byte(strings.Join(problems, "\n")+"\n"))
	}
}

// logArchive writes files under one directory of a tar stream, keeping
// the first error.
type logArchive struct {
	tw   *tar.Writer
	base string
	err  error
}

func (a *logArchive) add(name string, data []byte) {
	if a.err != nil {
		return
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: a.base + "/" + name, Mode: 0o644, Size: int64(len(data)), ModTime: time.Now()}
	if a.err = a.tw.WriteHeader(hdr); a.err == nil {
		_, a.err = a.tw.Write(data)
	}
}
