// Command bench measures kubeboot side by side with kubeadm on this machine
// and writes the result as a Markdown report, docs/benchmarks.md. `make
// bench` builds kubeboot and the pinned binaries, then runs it from the
// repository root:
//
//	go run ./test/bench -kubeboot bin/kubeboot -package bin/kubeboot.deb -bin-dir test/tools/bin -out docs/benchmarks.md
//
// With -only etcd-snapshot it measures only etcd snapshot save and restore
// beside etcdctl and etcdutl, and replaces that section of -out; with
// -only cluster-upgrade, only the whole-cluster upgrade beside kubeadm's
// (test/e2e's TestUpgradeBench on lab machines); with -only image-import,
// only `kubeboot images import` of a bundle beside `ctr images import`;
// with -only pod-network, only kubeboot's pod network beside kube-router;
// with -only cluster, only the clusters of machines and their targets; with
// -only usable-cluster, only the usable cluster of those.
//
// The machine is small and shared (two cores, often an end-to-end suite
// running beside), so absolute times drift from one run to the next. Every
// comparison is therefore a ratio of commands measured in the same run,
// interleaved round by round so that a burst of load hits both sides alike,
// and every figure is given as min, median and max over repeated runs.
//
// kubeadm's dry run talks to the API server it would create (it tries a
// real GET before falling back to its fake client), so every timed command,
// kubeboot's too, runs in a fresh network namespace of its own: nothing can
// leave the machine, and the refused connection costs nothing. Only the
// cluster jobs (`kubeboot lab up --cluster` of a lab of machines, which
// makes network namespaces of its own) and the etcd snapshot section (on a
// loopback address) run outside one.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options are the command-line flags.
type options struct {
	kubeboot, pkg, binDir, goBin string
	out, rawDir                  string
	address                      string
	runs, warmup                 int
	clusterRuns, clusterWarmup   int
	microCount, waitCount        int
	// only names the one section to measure, in place of the whole run.
	only                 string
	etcdRuns, etcdWarmup int
	// etcdMiB are the database sizes, in MiB, of the etcd snapshot
	// section, smallest first.
	etcdMiB []int
	// upgradeRounds is how many fleets per tool the whole-cluster upgrade
	// brings up and upgrades.
	upgradeRounds int
	// podNetworkRounds is how many labs per candidate the pod network's
	// section brings up.
	podNetworkRounds int
}

func main() {
	var o options
	flag.StringVar(&o.kubeboot, "kubeboot", "bin/kubeboot", "the kubeboot binary")
	flag.StringVar(&o.pkg, "package", "bin/kubeboot.deb", "kubeboot's .deb, which the lab's machines install (make package)")
	flag.StringVar(&o.binDir, "bin-dir", "test/tools/bin", "directory of kubeadm, etcd and the Kubernetes binaries (make binaries)")
	flag.StringVar(&o.goBin, "go", "go", "the go command, for the micro-benchmarks")
	flag.StringVar(&o.out, "out", "docs/benchmarks.md", "the report to write")
	flag.StringVar(&o.rawDir, "raw", ".cache/bench", "directory for raw outputs (go test -bench lines for benchstat, lab up's events of the last round and of a failed job)")
	flag.StringVar(&o.address, "address", "127.0.0.50", "loopback address the etcd snapshot section's etcd serves on; it must be free")
	flag.IntVar(&o.runs, "runs", 30, "timed runs of each command")
	flag.IntVar(&o.warmup, "warmup", 2, "untimed runs of each command first, to warm caches")
	flag.IntVar(&o.clusterRuns, "cluster-runs", 3, "timed rounds of the cluster jobs")
	flag.IntVar(&o.clusterWarmup, "cluster-warmup", 1, "untimed rounds of the cluster jobs first")
	flag.IntVar(&o.microCount, "micro-count", 6, "go test -count of the micro-benchmarks")
	flag.IntVar(&o.waitCount, "wait-count", 3, "go test -count of BenchmarkWaitDetection (20 iterations each)")
	flag.StringVar(&o.only, "only", "", "measure only this section and replace it in -out, the rest left as it is: "+etcdSnapshotOnly+", "+clusterUpgradeOnly+", "+usableOnly+", "+clusterOnly+", "+imageImportOnly+" or "+podNetworkOnly)
	flag.IntVar(&o.etcdRuns, "etcd-runs", 5, "timed rounds of the etcd snapshot saves and restores")
	flag.IntVar(&o.etcdWarmup, "etcd-warmup", 1, "untimed rounds of the etcd snapshot saves and restores first")
	o.etcdMiB = []int{100, 1024}
	flag.Func("etcd-mib", "database sizes in MiB the etcd snapshot section fills etcd to, one member each, comma-separated (default 100,1024)", func(v string) (err error) {
		o.etcdMiB, err = parseSizes(v)
		return err
	})
	flag.IntVar(&o.upgradeRounds, "upgrade-rounds", 2, "fleets per tool the whole-cluster upgrade brings up and upgrades, the tools' order alternating")
	flag.IntVar(&o.podNetworkRounds, "pod-network-rounds", 3, "labs per pod network the pod network's section brings up, the candidates' order rotating")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench: error:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if sections := []string{etcdSnapshotOnly, clusterUpgradeOnly, usableOnly, clusterOnly, imageImportOnly, podNetworkOnly}; o.only != "" && !slices.Contains(sections, o.only) {
		return fmt.Errorf("-only %q: the sections that run alone are %s", o.only, strings.Join(sections, ", "))
	}
	if o.upgradeRounds < 1 {
		return fmt.Errorf("-upgrade-rounds %d: want at least 1", o.upgradeRounds)
	}
	if o.podNetworkRounds < 1 {
		return fmt.Errorf("-pod-network-rounds %d: want at least 1", o.podNetworkRounds)
	}
	for _, p := range []*string{&o.kubeboot, &o.binDir, &o.out, &o.rawDir} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	if _, err := os.Stat("go.mod"); err != nil {
		return errors.New("run from the repository root (make bench does)")
	}
	if err := os.MkdirAll(o.rawDir, 0o755); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// A directory under /tmp for the cluster jobs' machines and the etcd
	// snapshot section's data.
	work, err := os.MkdirTemp("/tmp", "kbb-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(work) }()
	switch o.only {
	case etcdSnapshotOnly:
		return writeEtcdSnapshotOnly(ctx, o, work)
	case clusterUpgradeOnly:
		return writeClusterUpgradeOnly(ctx, o)
	case usableOnly:
		return writeUsableOnly(ctx, o, work)
	case clusterOnly:
		return writeClusterOnly(ctx, o, work)
	case imageImportOnly:
		return writeImageImportOnly(ctx, o)
	case podNetworkOnly:
		return writePodNetworkOnly(ctx, o, work)
	}

	r := &report{started: time.Now().UTC(), opts: o}
	r.machine = readMachine()
	if r.versions, err = readVersions(ctx, o); err != nil {
		return err
	}
	if r.clusters, err = measureClusters(ctx, o, work, clusterJobs, clusterJobs[:warmupJobs]); err != nil {
		return err
	}
	if r.commands, err = measureCommands(ctx, o, work, r.versions.kubeadm); err != nil {
		return err
	}
	if r.sizes, err = binarySizes(o); err != nil {
		return err
	}
	if r.wait, err = waitDetection(ctx, o); err != nil {
		return err
	}
	if r.clusterUpgrade, err = measureClusterUpgrade(ctx, o); err != nil {
		return err
	}
	if r.podNetwork, err = measurePodNetwork(ctx, o, work); err != nil {
		return err
	}
	if r.etcdSnapshot, err = measureEtcdSnapshot(ctx, o, work); err != nil {
		return err
	}
	if r.imageImport, err = measureImageImport(ctx, o); err != nil {
		return err
	}
	if r.micro, err = microBenchmarks(ctx, o); err != nil {
		return err
	}
	if r.keygenShare, err = keygenShare(ctx, o); err != nil {
		return err
	}
	r.finished = time.Now().UTC()
	r.loadEnd = loadAverage()
	if err := os.MkdirAll(filepath.Dir(o.out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(o.out, []byte(r.markdown()), 0o644); err != nil {
		return err
	}
	logf("wrote %s in %s", o.out, r.finished.Sub(r.started).Round(time.Second))
	return nil
}

// logf prints progress to stderr.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[bench] "+format+"\n", args...)
}

// parseSizes reads -etcd-mib: positive sizes in MiB, comma-separated,
// each larger than the one before.
func parseSizes(v string) ([]int, error) {
	var sizes []int
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 || (len(sizes) > 0 && n <= sizes[len(sizes)-1]) {
			return nil, fmt.Errorf("%q: want sizes in MiB, positive and increasing, like 100,1024", v)
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}
