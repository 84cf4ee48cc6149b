package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/files"
	"github.com/kubeboot/kubeboot/internal/snapshot"
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

// newEtcdCommand is `kubeboot etcd`: the node's etcd member.
func newEtcdCommand(d deps, stdout, stderr io.Writer) *cobra.Command {
	cmd := groupCommand("etcd", "Work with this control-plane node's etcd member")
	cmd.Example = examples(
		"kubeboot etcd snapshot save --config cluster.yaml",
		"kubeboot etcd members list --config cluster.yaml",
		"kubeboot etcd restore --config cluster.yaml --snapshot /var/lib/kubeboot/etcd-snapshots/etcd-snapshot-20261126T120000.000Z.db",
	)
	snapshots := groupCommand("snapshot", "Save, list and prune verified etcd snapshots in etcd.local.snapshotsDir")
	snapshots.Example = examples(
		"kubeboot etcd snapshot save --config cluster.yaml",
		"kubeboot etcd snapshot list --config cluster.yaml",
		"kubeboot etcd snapshot prune --keep 3 --config cluster.yaml",
	)
	snapshots.AddCommand(newSnapshotSaveCommand(d, stdout, stderr), newSnapshotListCommand(d, stdout), newSnapshotPruneCommand(d, stdout, stderr), newSnapshotScheduleCommand(stderr))
	cmd.AddCommand(snapshots, newMembersCommand(d, stdout, stderr), newEtcdRestoreCommand(d, stdout, stderr))
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
			save := snapshot.Save(snapshot.SaveOptions{Out: opts.out, Endpoint: opts.endpoint})
			return d.execute(cmd.Context(), opts.output, stdout, stderr, opts.spec, onNodeResult(save.Execute, func(n *phases.Node, r workflow.Result) any { return snapshot.SaveResultOf(n, r) }))
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
			hostPath := (&files.AtomicWriter{Root: r.root}).HostPath
			if opts.remote {
				list, err := snapshot.ListRemote(cmd.Context(), r.config, hostPath)
				if err != nil {
					return err
				}
				return printRemoteSnapshots(stdout, list, opts.output.json())
			}
			listing, err := snapshot.List(cmd.Context(), r.config, hostPath)
			if err != nil {
				return err
			}
			return printSnapshotListing(stdout, listing, opts.output.json())
		},
	}
	flags := cmd.Flags()
	addConfigFlag(flags, &opts.configPath)
	addRootFlag(flags, &opts.root)
	addOutputFlag(flags, &opts.output)
	flags.BoolVar(&opts.remote, "remote", false, "list the copies in etcd.local.scheduledSnapshots.s3 instead: every node's, newest first, with the s3:// URL etcd restore takes")
	return cmd
}

// printSnapshotListing writes what `etcd snapshot list` prints: the
// listing as a table and the schedule's outcome, or as one JSON object.
func printSnapshotListing(w io.Writer, l snapshot.Listing, asJSON bool) error {
	if asJSON {
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

// printRemoteSnapshots writes what `etcd snapshot list --remote` prints:
// the copies in the bucket as a table, or as one JSON array.
func printRemoteSnapshots(w io.Writer, list []snapshot.Remote, asJSON bool) error {
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
			prune := snapshot.Prune(opts.keep)
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
