package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kubeboot/kubeboot/internal/etcd"
)

// The etcd snapshot section: `-only etcd-snapshot` runs it alone, and its
// heading is where that run puts it in the report.
const (
	etcdSnapshotOnly    = "etcd-snapshot"
	etcdSnapshotHeading = "## etcd snapshots: save and restore beside etcdctl and etcdutl"
	// etcdSnapshotBefore is the heading the section goes before when a
	// report without it gets it.
	etcdSnapshotBefore = "## Lab: from init to a healthy control plane"
)

// How the member is filled: ConfigMap-shaped keys of fillValueSize bytes,
// fillBatch puts per transaction (etcd allows 128), fillClients
// transactions at once, fillTxns each between two looks at the size.
const (
	fillNamespace = "bench"
	fillValueSize = 1024
	fillBatch     = 64
	fillClients   = 8
	fillTxns      = 8
)

// etcdSnapshotNode is the member's name, which the restores keep.
const etcdSnapshotNode = "bench"

// etcdSnapshotResults are the section's measurements.
type etcdSnapshotResults struct {
	// commit is kubeboot's `git describe`, etcdVersion the member's.
	commit, etcdVersion string
	measured            time.Time
	address             string
	runs, warmup        int
	// keys were put to fill the member, up to dbSize bytes (etcd's
	// status); fileSize is the snapshot file's size.
	keys             int
	dbSize, fileSize int64
	save, restore    *group
	// kubebootSave, etcdctlSave, kubebootRestore, etcdutlRestore and
	// verify are the jobs of save and restore; etcdutlStart is etcdutl's
	// process start, which etcd.Restore in the bench's process does not
	// pay.
	kubebootSave, etcdctlSave, kubebootRestore, etcdutlRestore, verify, etcdutlStart *job
}

// etcdBench is a member on the bench's address with TLS from kubeboot's
// PKI, and the files of the jobs that snapshot and restore it.
type etcdBench struct {
	o                      options
	dir, root, config      string
	endpoint, peer         string
	tls                    etcd.TLSFiles
	kubebootFile, ctlFile  string
	restoreDir, etcdutlDir string
	res                    *etcdSnapshotResults
}

// measureEtcdSnapshot measures the saves and restores at each of
// -etcd-mib's database sizes, smallest first (measureEtcdSize).
func measureEtcdSnapshot(ctx context.Context, o options, work string) ([]*etcdSnapshotResults, error) {
	if err := ensureGNUTime(ctx); err != nil {
		return nil, err
	}
	var all []*etcdSnapshotResults
	for _, mib := range o.etcdMiB {
		res, err := measureEtcdSize(ctx, o, filepath.Join(work, fmt.Sprintf("etcd-snapshot-%d", mib)), mib)
		if err != nil {
			return nil, fmt.Errorf("etcd snapshots of %d MiB: %w", mib, err)
		}
		all = append(all, res)
	}
	return all, nil
}

// measureEtcdSize starts a member, fills it to mib MiB, times the saves
// with it running, stops it, then times the restores of kubeboot's last
// snapshot. Nothing it started is left running, and dir is removed.
func measureEtcdSize(ctx context.Context, o options, dir string, mib int) (*etcdSnapshotResults, error) {
	e, err := newEtcdBench(ctx, o, dir)
	if err != nil {
		return nil, err
	}
	cmd, err := e.startMember()
	if err != nil {
		return nil, err
	}
	err = e.fillAndSave(ctx, int64(mib)<<20)
	stopProcesses([]*exec.Cmd{cmd})
	if err = errors.Join(err, leftovers(e.dir)); err != nil {
		return nil, err
	}
	if err := measure(ctx, e.res.restore, o.etcdWarmup, o.etcdRuns, filepath.Join(e.dir, "rss")); err != nil {
		return nil, err
	}
	return e.res, os.RemoveAll(e.dir)
}

// newEtcdBench writes the node's configuration and kubeboot's PKI under
// dir, and builds the jobs.
func newEtcdBench(ctx context.Context, o options, dir string) (*etcdBench, error) {
	commit, err := output(ctx, "git", "describe", "--tags", "--always", "--dirty")
	if err != nil {
		return nil, err
	}
	version, err := output(ctx, filepath.Join(o.binDir, "etcd"), "--version")
	if err != nil {
		return nil, err
	}
	e := &etcdBench{o: o, dir: dir, root: filepath.Join(dir, "root"), config: filepath.Join(dir, "node.yaml"),
		endpoint: "https://" + o.address + ":2379", peer: "https://" + o.address + ":2380",
		kubebootFile: filepath.Join(dir, "kubeboot.db"), ctlFile: filepath.Join(dir, "etcdctl.db"),
		restoreDir: filepath.Join(dir, "restored"), etcdutlDir: filepath.Join(dir, "etcdutl-restored"),
		res: &etcdSnapshotResults{commit: commit, measured: time.Now().UTC(), address: o.address, runs: o.etcdRuns, warmup: o.etcdWarmup,
			etcdVersion: strings.TrimPrefix(strings.SplitN(version, "\n", 2)[0], "etcd Version: ")}}
	pki := filepath.Join(e.root, "etc", "kubernetes", "pki")
	e.tls = etcd.TLSFiles{CA: filepath.Join(pki, "etcd", "ca.crt"), Cert: filepath.Join(pki, "apiserver-etcd-client.crt"), Key: filepath.Join(pki, "apiserver-etcd-client.key")}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	node := fmt.Sprintf("apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\nnode: {name: %s, advertiseAddress: %s}\n", etcdSnapshotNode, o.address)
	if err := os.WriteFile(e.config, []byte(node), 0o600); err != nil {
		return nil, err
	}
	if _, err := kubebootJSON(ctx, o, time.Minute, "init", "phase", "certs", "--config", e.config, "--root", e.root); err != nil {
		return nil, err
	}
	e.buildJobs()
	return e, nil
}

// startMember starts etcd with the server certificate kubeboot issued,
// client certificates required from the etcd CA; its log goes to
// etcd.log in the bench's dir.
func (e *etcdBench) startMember() (*exec.Cmd, error) {
	pki := filepath.Dir(e.tls.CA)
	log, err := os.Create(filepath.Join(e.dir, "etcd.log"))
	if err != nil {
		return nil, err
	}
	// The child keeps its own copy of the descriptor.
	defer func() { _ = log.Close() }()
	peer := "http://" + e.o.address + ":2380"
	cmd := exec.Command(filepath.Join(e.o.binDir, "etcd"), "--name", etcdSnapshotNode, "--data-dir", filepath.Join(e.dir, "data"),
		"--listen-client-urls", e.endpoint, "--advertise-client-urls", e.endpoint,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", etcdSnapshotNode+"="+peer,
		"--cert-file", filepath.Join(pki, "server.crt"), "--key-file", filepath.Join(pki, "server.key"),
		"--client-cert-auth", "--trusted-ca-file", e.tls.CA)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start etcd: %w", err)
	}
	return cmd, nil
}

// fillAndSave fills the running member to size bytes, then times the
// saves.
func (e *etcdBench) fillAndSave(ctx context.Context, size int64) error {
	cli, err := etcd.New(ctx, []string{e.endpoint}, e.tls)
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	if err := e.waitMember(ctx, cli); err != nil {
		return err
	}
	start := time.Now()
	if err := e.fill(ctx, cli, size); err != nil {
		return err
	}
	logf("etcd-snapshot: %d keys put in %s, database %s", e.res.keys, time.Since(start).Round(time.Second), fmtBytes(float64(e.res.dbSize)))
	return measure(ctx, e.res.save, e.o.etcdWarmup, e.o.etcdRuns, filepath.Join(e.dir, "rss"))
}

// waitMember waits up to a minute for the member to answer.
func (e *etcdBench) waitMember(ctx context.Context, cli *clientv3.Client) error {
	deadline := time.Now().Add(time.Minute)
	for {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cli.Status(c, e.endpoint)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			log, _ := os.ReadFile(filepath.Join(e.dir, "etcd.log"))
			return fmt.Errorf("etcd at %s does not answer: %w\n%s", e.endpoint, err, lastLines(string(log), 10))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fill puts keys until the member's database (etcd's status dbSize)
// reaches size bytes.
func (e *etcdBench) fill(ctx context.Context, cli *clientv3.Client, size int64) error {
	for {
		st, err := cli.Status(ctx, e.endpoint)
		if err != nil {
			return err
		}
		if e.res.dbSize = st.DbSize; st.DbSize >= size {
			return nil
		}
		if err := putRound(ctx, cli, e.res.keys); err != nil {
			return err
		}
		e.res.keys += fillClients * fillTxns * fillBatch
	}
}

// putRound puts the next fillClients × fillTxns × fillBatch keys, after
// the first from keys: fillClients transactions at once.
func putRound(ctx context.Context, cli *clientv3.Client, from int) error {
	errs := make([]error, fillClients)
	var wg sync.WaitGroup
	for c := range fillClients {
		wg.Go(func() {
			for t := range fillTxns {
				first := from + (c*fillTxns+t)*fillBatch
				ops := make([]clientv3.Op, fillBatch)
				for i := range ops {
					name := fmt.Sprintf("cm-%d", first+i)
					ops[i] = clientv3.OpPut("/registry/configmaps/"+fillNamespace+"/"+name, configMapValue(name))
				}
				if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
					errs[c] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// configMapValue is a ConfigMap called name, as JSON, padded with its data
// to fillValueSize bytes.
func configMapValue(name string) string {
	head := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"` + name + `","namespace":"` + fillNamespace + `"},"data":{"payload":"`
	tail := `"}}`
	return head + strings.Repeat("x", max(0, fillValueSize-len(head)-len(tail))) + tail
}

// buildJobs builds the save group (each tool's save of the running
// member) and the restore group (each tool's restore of kubeboot's last
// snapshot into a new data dir, and kubeboot's verification of it).
func (e *etcdBench) buildJobs() {
	r := e.res
	r.kubebootSave = &job{
		name:    "kubeboot etcd snapshot save",
		shown:   "kubeboot etcd snapshot save --out <file> --config <node.yaml> --root <root> --endpoint " + e.endpoint + " -o json",
		prepare: removeFile(e.kubebootFile),
		steps: []step{{argv: []string{e.o.kubeboot, "etcd", "snapshot", "save", "--out", e.kubebootFile, "--config", e.config,
			"--root", e.root, "--endpoint", e.endpoint, "-o", "json"}, hostNet: true}},
		check: e.checkSaved,
	}
	r.etcdctlSave = &job{
		name: "etcdctl snapshot save",
		shown: "etcdctl --endpoints " + e.endpoint + " --cacert <etcd CA> --cert <apiserver-etcd-client.crt> --key <apiserver-etcd-client.key>" +
			" snapshot save <file>",
		prepare: removeFile(e.ctlFile),
		steps: []step{{argv: []string{filepath.Join(e.o.binDir, "etcdctl"), "--endpoints", e.endpoint,
			"--cacert", e.tls.CA, "--cert", e.tls.Cert, "--key", e.tls.Key, "snapshot", "save", e.ctlFile}, hostNet: true}},
	}
	r.save = &group{title: "etcd snapshot save", jobs: []*job{r.kubebootSave, r.etcdctlSave}, ref: r.etcdctlSave}

	token := "kubeboot-restore-bench"
	r.kubebootRestore = &job{
		name:    "etcd.Restore",
		shown:   fmt.Sprintf("etcd.Restore(<kubeboot's snapshot>, <new data dir>, %q, %q), in the bench's process", etcdSnapshotNode, e.peer),
		prepare: removeFile(e.restoreDir),
		steps: []step{{call: func() error {
			return etcd.Restore(context.Background(), e.kubebootFile, e.restoreDir, etcdSnapshotNode, e.peer)
		}}},
	}
	bump := fmt.Sprint(etcd.RestoreRevisionBump)
	r.etcdutlRestore = &job{
		name: "etcdutl snapshot restore",
		shown: fmt.Sprintf("etcdutl snapshot restore <kubeboot's snapshot> --data-dir <new data dir> --name %s --initial-cluster %s=%s --initial-advertise-peer-urls %s --initial-cluster-token %s --bump-revision %s --mark-compacted",
			etcdSnapshotNode, etcdSnapshotNode, e.peer, e.peer, token, bump),
		prepare: removeFile(e.etcdutlDir),
		steps: []step{{argv: []string{filepath.Join(e.o.binDir, "etcdutl"), "snapshot", "restore", e.kubebootFile, "--data-dir", e.etcdutlDir,
			"--name", etcdSnapshotNode, "--initial-cluster", etcdSnapshotNode + "=" + e.peer, "--initial-advertise-peer-urls", e.peer,
			"--initial-cluster-token", token, "--bump-revision", bump, "--mark-compacted"}}},
	}
	r.verify = &job{
		name:  "etcd.VerifySnapshot",
		shown: "etcd.VerifySnapshot(<kubeboot's snapshot>), in the bench's process",
		steps: []step{{call: e.verifySnapshot}},
	}
	r.etcdutlStart = &job{
		name:  "etcdutl version",
		shown: "etcdutl version",
		steps: []step{{argv: []string{filepath.Join(e.o.binDir, "etcdutl"), "version"}}},
	}
	r.restore = &group{title: "etcd snapshot restore", jobs: []*job{r.kubebootRestore, r.etcdutlRestore, r.verify, r.etcdutlStart}}
}

// removeFile returns a prepare function that removes path, a file or a
// tree.
func removeFile(path string) func() error {
	return func() error { return os.RemoveAll(path) }
}

// checkSaved checks kubeboot's -o json result: a snapshot of every key
// put. It records the file's size.
func (e *etcdBench) checkSaved(stdout []byte) error {
	lines := strings.Split(strings.TrimSpace(string(stdout)), "\n")
	var res struct {
		Result *struct {
			OK       bool               `json:"ok"`
			Error    string             `json:"error"`
			Snapshot *etcd.SnapshotInfo `json:"snapshot"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		return fmt.Errorf("decode the -o json result: %w", err)
	}
	switch {
	case res.Result == nil || res.Result.Snapshot == nil:
		return errors.New("no snapshot in the -o json result")
	case !res.Result.OK:
		return errors.New(res.Result.Error)
	case res.Result.Snapshot.Keys != e.res.keys:
		return fmt.Errorf("the snapshot holds %d keys, want the %d put", res.Result.Snapshot.Keys, e.res.keys)
	}
	e.res.fileSize = res.Result.Snapshot.Size
	return nil
}

// verifySnapshot verifies kubeboot's snapshot, which must hold every key
// put.
func (e *etcdBench) verifySnapshot() error {
	info, err := etcd.VerifySnapshot(context.Background(), e.kubebootFile)
	if err == nil && info.Keys != e.res.keys {
		err = fmt.Errorf("the snapshot holds %d keys, want the %d put", info.Keys, e.res.keys)
	}
	return err
}

// writeEtcdSnapshotOnly is `-only etcd-snapshot`: it measures the section
// and puts it in the report at -out in place of the section there, the
// rest of the report left as it is.
func writeEtcdSnapshotOnly(ctx context.Context, o options, work string) error {
	res, err := measureEtcdSnapshot(ctx, o, work)
	if err != nil {
		return err
	}
	var b strings.Builder
	etcdSnapshotMarkdown(&b, res)
	return replaceSection(o.out, etcdSnapshotHeading, etcdSnapshotBefore, b.String())
}

// replaceSection puts section, whose heading is heading, in the report at
// path in place of the section there (see spliceSection).
func replaceSection(path, heading, before, section string) error {
	doc, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.WriteFile(path, []byte(spliceSection(string(doc), heading, before, section)), 0o644); err != nil {
		return err
	}
	logf("wrote the section %q of %s", heading, path)
	return nil
}

// spliceSection replaces the section of doc that starts with heading, up
// to the next heading of its level or a higher one ("## " ends a "### "
// section), with section; a doc without it gets section before the
// heading before, or at its end.
func spliceSection(doc, heading, before, section string) string {
	if start := strings.Index(doc, heading+"\n"); start >= 0 {
		level := len(heading) - len(strings.TrimLeft(heading, "#"))
		end := start + len(heading) + 1
		for end < len(doc) {
			line, _, _ := strings.Cut(doc[end:], "\n")
			if n := len(line) - len(strings.TrimLeft(line, "#")); n > 0 && n <= level && strings.HasPrefix(line[n:], " ") {
				break
			}
			end += len(line) + 1
		}
		return doc[:start] + section + doc[min(end, len(doc)):]
	}
	if at := strings.Index(doc, before+"\n"); at >= 0 {
		return doc[:at] + section + doc[at:]
	}
	return doc + section
}

// etcdSnapshotMarkdown writes the section: what was measured, then a
// table and its reading per database size.
func etcdSnapshotMarkdown(b *strings.Builder, all []*etcdSnapshotResults) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	r := all[0]
	w("%s\n\n", etcdSnapshotHeading)
	w("Measured at kubeboot %s on %s (`go run ./test/bench -only %s` measures this section alone and replaces it here). ", r.commit, r.measured.Format("2006-01-02 15:04 MST"), etcdSnapshotOnly)
	w("A real etcd %s on %s, with TLS from kubeboot's PKI (`kubeboot init phase certs`), is filled with ConfigMap-shaped keys ", r.etcdVersion, r.address)
	w("(`/registry/configmaps/%s/cm-N`, %d-byte values) until its database (etcd's dbSize) reaches each size below, a new member for each. ", fillNamespace, fillValueSize)
	w("The saves run against it, in the bench's own network namespace to reach it, %d timed rounds after %d warm-up, interleaved round by round in a rotating order; then it stops, and the restores of kubeboot's last snapshot into a new data dir run the same way. ", r.runs, r.warmup)
	w("kubeboot's restore of a data dir is `etcd.Restore`, the step of `kubeboot etcd restore` between stopping the control plane and starting it again, which the bench cannot host; ")
	w("it and `etcd.VerifySnapshot` run inside the bench's process, so they have no peak RSS of their own and no process start; `etcdutl version` is there for that start.\n\n")
	for _, j := range []*job{r.kubebootSave, r.etcdctlSave, r.kubebootRestore, r.etcdutlRestore, r.verify, r.etcdutlStart} {
		w("- %s: `%s`\n", j.name, j.shown)
	}
	w("\nBoth saves stream the same Maintenance snapshot and fsync the file before renaming it into place; ")
	w("kubeboot's also loads its configuration, takes the node lock, asks the member's status first, verifies the file before the rename ")
	w("(the sha256 of the whole file, bbolt's page check, the revision and keys read back) and syncs the directory after. ")
	w("bbolt maps the snapshot file to check its pages, so the file's pages count in kubeboot's peak RSS, as they do in etcdutl's restore. ")
	w("`etcd.Restore` is etcdutl's own restore library given the same member, peer URL, revision bump and compaction mark, so the two restores do the same work; ")
	w("`kubeboot etcd restore` verifies the snapshot before it stops anything, so its work on the files is the verification plus that step.\n\n")
	for _, r := range all {
		r.sizeMarkdown(b)
	}
}

// sizeMarkdown writes the table of one database size and its reading.
func (r *etcdSnapshotResults) sizeMarkdown(b *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("### A database of %s: %d keys, a snapshot file of %s\n\n", fmtBytes(float64(r.dbSize)), r.keys, fmtBytes(float64(r.fileSize)))
	w("| command | wall min / median / max | ratio to the etcd tool | CPU median | peak RSS median |\n|---|---|---|---|---|\n")
	for _, row := range []struct{ j, ref *job }{{r.kubebootSave, r.etcdctlSave}, {r.etcdctlSave, r.etcdctlSave}, {r.kubebootRestore, r.etcdutlRestore}, {r.etcdutlRestore, r.etcdutlRestore}, {r.verify, nil}, {r.etcdutlStart, nil}} {
		wall := row.j.wall()
		w("| %s | %s / %s / %s | %s | %s | %s |\n", row.j.name, fmtSeconds(wall.min), fmtSeconds(wall.median), fmtSeconds(wall.max),
			ratioCell(row.j, row.ref), fmtSeconds(row.j.cpu().median), rssCell(row.j))
	}
	ctl, verify := r.etcdctlSave.wall().median, r.verify.wall().median
	restore, etcdutl := r.kubebootRestore.wall().median, r.etcdutlRestore.wall().median
	kb := r.kubebootSave.wall().median
	w("\nThe verification alone takes %s. etcdctl's save plus the verification is %s, %s of etcdctl's, against the measured %s: the verification is %.0f%% of the difference between the medians. ",
		fmtSeconds(verify), fmtSeconds(ctl+verify), fmtRatio((ctl+verify)/ctl), fmtRatio(kb/ctl), 100*verify/(kb-ctl))
	start := r.etcdutlStart.wall().median
	w("etcd.Restore runs in the bench's process, already started and with logging off: etcdutl's restore less its start (`etcdutl version`, %s) is %s, against etcd.Restore's %s. ",
		fmtSeconds(start), fmtSeconds(etcdutl-start), fmtSeconds(restore))
	w("`kubeboot etcd restore`'s work on the files, the verification plus etcd.Restore, is %s by the medians, %s of etcdutl's restore.\n\n",
		fmtSeconds(verify+restore), fmtRatio((verify+restore)/etcdutl))
}

// ratioCell is j's median wall time over ref's, with the range of the
// per-round ratios; a dash without ref.
func ratioCell(j, ref *job) string {
	if ref == nil {
		return "—"
	}
	rr := roundRatios(j, ref)
	return fmt.Sprintf("%s (%.2f–%.2f)", fmtRatio(j.wall().median/ref.wall().median), rr.min, rr.max)
}

// rssCell is j's median peak RSS, or a dash for work in the bench's own
// process.
func rssCell(j *job) string {
	if j.steps[0].call != nil {
		return "—"
	}
	return fmtBytes(j.rss().median)
}
