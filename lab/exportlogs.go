package lab

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kubeboot/kubeboot/machine"
)

// nodeLogUnits are the services whose journals ExportLogs writes apart,
// besides the node's whole journal.
var nodeLogUnits = []string{"kubelet", "containerd", "kubeboot-bootstrap", "kubeboot-lab-images"}

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
// and its pods' logs (/var/log/pods); from the first control-plane node,
// `kubectl get` dumps of the nodes, pods, events and workloads. What
// could not be collected (a node that is not running, the API server
// down) is written as <node>/errors.txt rather than ending the export. The
// file appears whole or not at all.
func (l MachineLab) ExportLogs(ctx context.Context, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("export logs: %w", err)
	}
	base := fmt.Sprintf("kubeboot-lab-%s-%s", l.Cluster.Name, time.Now().UTC().Format("20060102-150405"))
	tmp, err := os.CreateTemp(dir, "."+base+"-*.tar.gz")
	if err != nil {
		return "", fmt.Errorf("export logs: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	zw := gzip.NewWriter(tmp)
	a := &logArchive{tw: tar.NewWriter(zw), base: base}
	for i := range l.Cluster.Nodes {
		l.exportNode(ctx, a, l.machine(i))
	}
	l.exportCluster(ctx, a)
	err = a.err
	for _, closer := range []func() error{a.tw.Close, zw.Close, tmp.Sync, tmp.Close} {
		if cerr := closer(); err == nil {
			err = cerr
		}
	}
	path := filepath.Join(dir, base+".tar.gz")
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return "", fmt.Errorf("export logs to %s: %w", path, err)
	}
	return path, nil
}

// exportNode adds a node's journals and pods' logs.
func (l MachineLab) exportNode(ctx context.Context, a *logArchive, m machine.Machine) {
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
	pods := filepath.Join(m.Root(), "var/log/pods")
	err := filepath.WalkDir(pods, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(m.Root(), path)
		a.add(m.Name+"/"+filepath.ToSlash(rel), data)
		return nil
	})
	if err != nil {
		problems = append(problems, fmt.Sprintf("the pods' logs in %s: %v", pods, err))
	}
	if len(problems) > 0 {
		a.add(m.Name+"/errors.txt", []byte(strings.Join(problems, "\n")+"\n"))
	}
}

// exportCluster adds the `kubectl get` dumps, through the first
// control-plane node's admin.conf.
func (l MachineLab) exportCluster(ctx context.Context, a *logArchive) {
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
