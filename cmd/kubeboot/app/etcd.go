package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/internal/backup"
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/etcd"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/files"
	"github.com/kubeboot/kubeboot/internal/s3store"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
)

// snapshotOptions are the flags of `kubeboot etcd snapshot save|list|prune`.
type snapshotOptions struct {
	deps       deps
	configPath string
	root       string
	output     outputFormat
	// out is save's --out; empty for a new file in the snapshot dir.
	out string
	// endpoint is save's --endpoint; empty for this node's member.
	endpoint string
	// keep is prune's --keep.
	keep int
	// remote is list's --remote.
	remote bool
}

// spec loads the node's configuration, which must run a local etcd
// member: its etcd.local.snapshotsDir is the snapshot dir.
func (o *snapshotOptions) spec() (runSpec, error) {
	return o.deps.localEtcdSpec(o.configPath, o.root, "takes snapshots of", "back up")
}

// localEtcdSpec is the runSpec of an etcd command on a control-plane node
// under root, whose configuration must run a local etcd member: kubeboot
// <does> the member it runs, and an external etcd's users <theirs> it with
// the tools of whoever runs it.
func (d deps) localEtcdSpec(configPath, root, does, theirs string) (runSpec, error) {
	r, err := d.nodeSpec(configPath, root)
	if err != nil {
		return runSpec{}, err
	}
	if r.config.Etcd.Local == nil {
		return runSpec{}, &exit.UsageError{Msg: "etcd.external: kubeboot " + does + " the etcd member it runs on a control-plane node (etcd.local); " + theirs + " an external etcd with the tools of whoever runs it"}
	}
	return r, nil
}

// snapshotDir is the node's snapshot dir on this machine.
func (o *snapshotOptions) snapshotDir(c *config.ClusterConfiguration) string {
	return (&files.AtomicWriter{Root: o.root}).HostPath(c.Etcd.Local.SnapshotsDir)
}

// newEtcdCommand is `kubeboot etcd`: the node's etcd member.
func newEtcdCommand(d deps, stdout, stderr io.Writer) *cobra.Command {
	cmd := groupCommand("etcd", "Work with this control-plane node's etcd member")
	cmd.Example = examples(
		"kubeboot etcd snapshot save --config cluster.yaml",
		"kubeboot etcd members list --config cluster.yaml",
		"kubeboot etcd restore --config cluster.yaml --snapshot /var/lib/kubeboot/etcd-snapshots/etcd-snapshot-20261126T120000.000Z.db",
	)
	snapshot := groupCommand("snapshot", "Save, list and prune verified etcd snapshots in etcd.local.snapshotsDir")
	snapshot.Example = examples(
		"kubeboot etcd snapshot save --config cluster.yaml",
		"kubeboot etcd snapshot list --config cluster.yaml",
		"kubeboot etcd snapshot prune --keep 3 --config cluster.yaml",
	)
	snapshot.AddCommand(newSnapshotSaveCommand(d, stdout, stderr), newSnapshotListCommand(d, stdout), newSnapshotPruneCommand(d, stdout, stderr), newSnapshotScheduleCommand(stderr))
	cmd.AddCommand(snapshot, newMembersCommand(d, stdout, stderr), newEtcdRestoreCommand(d, stdout, stderr))
	return cmd
}

// newSnapshotSaveCommand is `kubeboot etcd snapshot save`.
func newSnapshotSaveCommand(d deps, stdout, stderr io.Writer) *cobra.Command {
	opts := &snapshotOptions{deps: d}
	cmd := &cobra.Command{
		Use:   "save",
		Short: "Save a consistent snapshot of the local etcd member, written atomically and kept only once it verifies (integrity hash, database, revision and keys)",
		Example: examples(
			"kubeboot etcd snapshot save --config cluster.yaml",
			"kubeboot etcd snapshot save --config cluster.yaml --out /var/backups/etcd.db",
		),
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.checkSave(); err != nil {
				return err
			}
			save := workflow.Operation[*phases.Node]{Name: "etcd-snapshot-save", Run: opts.save}
			return d.execute(cmd.Context(), opts.output, stdout, stderr, opts.spec, onNode(save.Execute))
		},
	}
	flags := cmd.Flags()
	addConfigFlag(flags, &opts.configPath)
	addRootFlag(flags, &opts.root)
	addOutputFlag(flags, &opts.output)
	flags.StringVar(&opts.out, "out", "", "the snapshot file, replaced only by a snapshot that verifies; its directory must exist (default: etcd-snapshot-<UTC time>.db in etcd.local.snapshotsDir)")
	flags.StringVar(&opts.endpoint, "endpoint", "", "the client URL of the member (default: this node's, https://<node.advertiseAddress>:2379)")
	return cmd
}

// checkSave refuses, before anything dials etcd, an --out that kubeboot
// cannot write (see files.CheckTarget) or whose directory does not exist,
// and an --endpoint that is no client URL.
func (o *snapshotOptions) checkSave() error {
	if o.out != "" {
		if err := files.CheckTarget("--out", o.out); err != nil {
			return err
		}
		dir := filepath.Dir(o.out)
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			return &exit.UsageError{Msg: fmt.Sprintf("--out %s: the directory %s does not exist: create it first, or name a file in an existing directory", o.out, dir)}
		}
	}
	return checkEndpoint(o.endpoint)
}

// checkEndpoint refuses an etcd command's --endpoint, unless it is empty
// (this node's member) or a client URL as etcd's own flags take one: http
// or https, host:port, and nothing after but a slash. Every etcd command
// checks its --endpoint here, before anything dials it.
func checkEndpoint(endpoint string) error {
	if endpoint == "" {
		return nil
	}
	u, err := url.Parse(endpoint)
	if err == nil && u.User != nil {
		// Not quoted: it may hold a password.
		return &exit.UsageError{Msg: "--endpoint: an etcd client URL holds no user or password, the client certificate authenticates: give one like https://10.0.0.10:2379"}
	}
	refused := &exit.UsageError{Msg: fmt.Sprintf("--endpoint %q: not an etcd client URL (http or https, host:port, no path): give one like https://10.0.0.10:2379", endpoint)}
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Hostname() == "" ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return refused
	}
	if port, err := strconv.Atoi(u.Port()); err != nil || port < 1 || port > 65535 {
		return refused
	}
	return nil
}

// save is the save operation: the snapshot, and the result's account of it.
func (o *snapshotOptions) save(ctx context.Context, s *phases.Node) error {
	at := time.Now().UTC()
	path := o.out
	if path == "" {
		dir := s.Config.Etcd.Local.SnapshotsDir
		if err := s.Files.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		path = s.Files.HostPath(filepath.Join(dir, etcd.SnapshotName(at)))
	}
	endpoint := o.endpoint
	if endpoint == "" {
		endpoint = etcd.ClientURL(s.Config)
	}
	s.Report.Infof("saving a snapshot of etcd at %s to %s", endpoint, path)
	info, err := etcd.SaveSnapshot(ctx, endpoint, etcd.LocalTLS(s.Config, s.Files.HostPath), path)
	if err != nil {
		return err
	}
	if o.out == "" {
		info.Time = at // the time in its name
	}
	s.Snapshot = &info
	s.Report.Infof("saved and verified %s: %d bytes, revision %d, %d keys", info.Path, info.Size, info.Revision, info.Keys)
	return nil
}

// newSnapshotListCommand is `kubeboot etcd snapshot list`.
func newSnapshotListCommand(d deps, stdout io.Writer) *cobra.Command {
	opts := &snapshotOptions{deps: d}
	cmd := &cobra.Command{
		Use:   "list [--remote]",
		Short: "List the snapshots in etcd.local.snapshotsDir, newest first, each verified, and the snapshot schedule's last outcome; --remote lists the cluster's copies in S3",
		Example: examples(
			"kubeboot etcd snapshot list --config cluster.yaml",
			"kubeboot etcd snapshot list --remote --config cluster.yaml",
		),
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := opts.spec()
			if err != nil {
				return err
			}
			if opts.remote {
				return listRemote(cmd.Context(), stdout, r, opts.output.json())
			}
			dir := opts.snapshotDir(r.config)
			list, err := etcd.ListSnapshots(cmd.Context(), dir)
			if err != nil {
				return err
			}
			status, scheduled, err := backup.ReadStatus(dir)
			if err != nil {
				return err
			}
			listing := snapshotListing{Dir: r.config.Etcd.Local.SnapshotsDir, Snapshots: list}
			if scheduled {
				listing.Schedule = &status
			}
			return listing.print(stdout, opts.output.json())
		},
	}
	flags := cmd.Flags()
	addConfigFlag(flags, &opts.configPath)
	addRootFlag(flags, &opts.root)
	addOutputFlag(flags, &opts.output)
	flags.BoolVar(&opts.remote, "remote", false, "list the copies in etcd.local.scheduledSnapshots.s3 instead: every node's, newest first, with the s3:// URL etcd restore takes")
	return cmd
}

// snapshotListing is what `etcd snapshot list` prints.
type snapshotListing struct {
	// Dir is the snapshot dir.
	Dir string `json:"dir"`
	// Snapshots are kubeboot's snapshots in it, newest first.
	Snapshots []etcd.SnapshotEntry `json:"snapshots"`
	// Schedule is the snapshot schedule's last outcome; nil when no
	// schedule has run in Dir.
	Schedule *backup.Status `json:"schedule,omitempty"`
}

// print writes the listing as a table and the schedule's outcome, or as
// one JSON object.
func (l snapshotListing) print(w io.Writer, asJSON bool) error {
	if asJSON {
		if l.Snapshots == nil {
			l.Snapshots = []etcd.SnapshotEntry{}
		}
		return json.NewEncoder(w).Encode(l)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "NAME\tSIZE\tTIME\tREVISION\tKEYS\tVERIFIED")
	for _, e := range l.Snapshots {
		verified := "yes"
		switch {
		case e.Unverifiable:
			verified = "UNKNOWN: " + e.Problem
		case !e.Verified:
			verified = "NO: " + e.Problem
		}
		_, _ = fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%s\n", e.Name, e.Size, e.Time.Format(time.RFC3339), e.Revision, e.Keys, verified)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if st := l.Schedule; st != nil {
		last := "never"
		if !st.LastSuccess.IsZero() {
			last = st.LastSuccess.Format(time.RFC3339) + " (" + filepath.Base(st.LastSnapshot) + ")"
			if st.LastUpload != "" {
				last += ", copied to " + st.LastUpload
			}
		}
		_, err := fmt.Fprintf(w, "\nscheduled snapshots: last success %s\n", last)
		if err == nil && st.Error != "" {
			_, err = fmt.Fprintf(w, "scheduled snapshots: FAILING: the round of %s failed: %s\n", st.LastAttempt.Format(time.RFC3339), st.Error)
		}
		return err
	}
	return nil
}

// remoteSnapshot is one copy in the bucket, as `list --remote` prints it.
type remoteSnapshot struct {
	// URL is what `etcd restore --snapshot` takes.
	URL  string    `json:"url"`
	Size int64     `json:"size"`
	Time time.Time `json:"time"`
}

// listRemote prints kubeboot's snapshot copies under the configured
// prefix, every node's, newest first by the time in their names.
func listRemote(ctx context.Context, w io.Writer, r runSpec, asJSON bool) error {
	s := r.config.Etcd.Local.ScheduledSnapshots
	if s == nil || s.S3 == nil {
		return &exit.UsageError{Msg: "etcd snapshot list --remote: etcd.local.scheduledSnapshots.s3 is not set in the configuration: set its endpoint, bucket and credentialsFile"}
	}
	bucket, err := s3store.Open(*s.S3, (&files.AtomicWriter{Root: r.root}).HostPath)
	if err != nil {
		return err
	}
	objects, err := bucket.List(ctx, s.S3.Prefix)
	if err != nil {
		return err
	}
	list := []remoteSnapshot{}
	for _, o := range objects {
		if t, ok := etcd.SnapshotTime(path.Base(o.Key)); ok {
			list = append(list, remoteSnapshot{URL: bucket.URL(o.Key), Size: o.Size, Time: t})
		}
	}
	slices.SortStableFunc(list, func(a, b remoteSnapshot) int { return b.Time.Compare(a.Time) })
	if asJSON {
		return json.NewEncoder(w).Encode(list)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "URL\tSIZE\tTIME")
	for _, e := range list {
		_, _ = fmt.Fprintf(tw, "%s\t%d\t%s\n", e.URL, e.Size, e.Time.Format(time.RFC3339))
	}
	return tw.Flush()
}

// newSnapshotPruneCommand is `kubeboot etcd snapshot prune`.
func newSnapshotPruneCommand(d deps, stdout, stderr io.Writer) *cobra.Command {
	opts := &snapshotOptions{deps: d}
	cmd := &cobra.Command{
		Use:     "prune",
		Short:   "Keep the newest --keep snapshots in etcd.local.snapshotsDir that verify and remove kubeboot's others (never a file it did not name)",
		Example: examples("kubeboot etcd snapshot prune --keep 3 --config cluster.yaml"),
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.keep < 1 {
				return &exit.UsageError{Msg: fmt.Sprintf("--keep %d: keep at least 1 snapshot", opts.keep)}
			}
			prune := workflow.Operation[*phases.Node]{Name: "etcd-snapshot-prune", Run: opts.prune}
			return d.execute(cmd.Context(), opts.output, stdout, stderr, opts.spec, onNode(prune.Execute))
		},
	}
	flags := cmd.Flags()
	addConfigFlag(flags, &opts.configPath)
	addRootFlag(flags, &opts.root)
	addOutputFlag(flags, &opts.output)
	flags.IntVar(&opts.keep, "keep", 0, "how many of the newest snapshots that verify to keep (required, at least 1)")
	return cmd
}

// prune is the prune operation. A snapshot that could not be verified is
// kept, and said so.
func (o *snapshotOptions) prune(ctx context.Context, s *phases.Node) error {
	dir := s.Config.Etcd.Local.SnapshotsDir
	list, err := etcd.ListSnapshots(ctx, s.Files.HostPath(dir))
	if err != nil {
		return err
	}
	for _, e := range list {
		if e.Unverifiable {
			s.Report.Warnf("kept %s: %s", e.Name, e.Problem)
		}
	}
	remove := etcd.SnapshotsToPrune(list, o.keep)
	for _, e := range remove {
		if err := s.Files.Remove(filepath.Join(dir, e.Name)); err != nil {
			return err
		}
		why := ""
		if !e.Verified {
			why = " (it does not verify: " + e.Problem + ")"
		}
		s.Report.Infof("removed %s%s", e.Name, why)
	}
	s.Report.Infof("kept %d of %d snapshots in %s", len(list)-len(remove), len(list), dir)
	return nil
}
