package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/internal/etcd"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/files"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
)

// membersOptions are the flags of `kubeboot etcd members [list|remove NAME]`.
type membersOptions struct {
	deps       deps
	configPath string
	root       string
	output     outputFormat
	// endpoint is --endpoint; empty for this node's member.
	endpoint string
}

// spec refuses a bad --endpoint, then loads the node's configuration,
// which must run a local etcd member.
func (o *membersOptions) spec() (runSpec, error) {
	if err := checkEndpoint(o.endpoint); err != nil {
		return runSpec{}, err
	}
	return o.deps.localEtcdSpec(o.configPath, o.root, "manages the cluster of", "manage the members of")
}

// newMembersCommand is `kubeboot etcd members`: alone, the same as list.
func newMembersCommand(d deps, stdout, stderr io.Writer) *cobra.Command {
	opts := &membersOptions{deps: d}
	list := func(cmd *cobra.Command, _ []string) error { return opts.list(cmd.Context(), stdout) }
	cmd := &cobra.Command{
		Use:   "members",
		Short: "List the etcd cluster's members with their health (alone: the same as list), or remove a dead one before its node is replaced",
		Example: examples(
			"kubeboot etcd members --config cluster.yaml",
			"kubeboot etcd members remove cp3 --config cluster.yaml",
		),
		Args: usageArgs(cobra.NoArgs),
		RunE: list,
	}
	flags := cmd.PersistentFlags()
	addConfigFlag(flags, &opts.configPath)
	addRootFlag(flags, &opts.root)
	addOutputFlag(flags, &opts.output)
	flags.StringVar(&opts.endpoint, "endpoint", "", "the client URL of the member to ask for the member list (default: this node's, https://<node.advertiseAddress>:2379); each member's status is asked on its own client URLs")
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List every member: name, ID, URLs, learner or voter, leader, health, DB size, raft index and term; and the cluster's alarms",
		Example: examples(
			"kubeboot etcd members list --config cluster.yaml",
			"kubeboot etcd members list --config join.yaml -o json",
		),
		Args: usageArgs(cobra.NoArgs),
		RunE: list,
	}, newMembersRemoveCommand(opts, stdout, stderr))
	return cmd
}

// newMembersRemoveCommand is `kubeboot etcd members remove NAME`.
func newMembersRemoveCommand(opts *membersOptions, stdout, stderr io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:     "remove NAME",
		Short:   "Remove the member NAME (its node's name; the hex ID of a learner that never started) before its node is replaced; refused for this node's own member (run `kubeboot reset` there) and when the healthy voters left would not form a quorum",
		Example: examples("kubeboot etcd members remove cp3 --config cluster.yaml"),
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return &exit.UsageError{Msg: fmt.Sprintf("etcd members remove takes the NAME of one member (got %d arguments); `kubeboot etcd members list` shows them", len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			remove := workflow.Operation[*phases.Node]{Name: "etcd-members-remove", Run: func(ctx context.Context, s *phases.Node) error {
				return opts.remove(ctx, s, args[0])
			}}
			return opts.deps.execute(cmd.Context(), opts.output, stdout, stderr, opts.spec, onNode(remove.Execute))
		},
	}
}

// list prints the members and the alarms.
func (o *membersOptions) list(ctx context.Context, stdout io.Writer) error {
	r, err := o.spec()
	if err != nil {
		return err
	}
	list, err := etcd.ListLocalMembers(ctx, r.config, o.endpoint, (&files.AtomicWriter{Root: r.root}).HostPath)
	if err != nil {
		return err
	}
	return printMembers(stdout, list, o.output.json())
}

// remove is the remove operation, on the cluster of this node's member.
func (o *membersOptions) remove(ctx context.Context, s *phases.Node, name string) error {
	return etcd.RemoveLocalMember(ctx, s.Config, o.endpoint, s.Files.HostPath, name, s.Report)
}

// printMembers prints the members as a table followed by the alarms, or
// the list as one JSON object.
func printMembers(w io.Writer, list etcd.MemberList, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(list)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "NAME\tID\tROLE\tLEADER\tHEALTH\tDB SIZE\tIN USE\tRAFT INDEX\tRAFT TERM\tCLIENT URLS\tPEER URLS")
	for _, m := range list.Members {
		name, role, leader := m.Name, "voter", ""
		if name == "" {
			name = "(unstarted)"
		}
		if m.Learner {
			role = "learner"
		}
		if m.Leader {
			leader = "*"
		}
		index, term := "-", "-"
		if m.Healthy {
			index, term = strconv.FormatUint(m.RaftIndex, 10), strconv.FormatUint(m.RaftTerm, 10)
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, m.ID, role, leader, health(m),
			byteSize(m.DBSize), byteSize(m.DBSizeInUse), index, term, strings.Join(m.ClientURLs, ","), strings.Join(m.PeerURLs, ","))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	switch {
	case list.AlarmsError != "":
		_, err := fmt.Fprintf(w, "alarms: unknown (%s)\n", list.AlarmsError)
		return err
	case len(list.Alarms) == 0:
		_, err := fmt.Fprintln(w, "alarms: none")
		return err
	}
	for _, a := range list.Alarms {
		if _, err := fmt.Fprintf(w, "alarm: %s on member %s (%s)\n", a.Alarm, a.Member, a.MemberID); err != nil {
			return err
		}
	}
	return nil
}

// health is a member's health for people.
func health(m etcd.MemberStatus) string {
	switch {
	case !m.Healthy:
		return "unhealthy: " + m.Problem
	case len(m.Errors) > 0:
		return "answers, with errors: " + strings.Join(m.Errors, "; ")
	}
	return "healthy"
}

// byteSize is a size in bytes for people, in binary units; "-" for none.
func byteSize(n int64) string {
	if n <= 0 {
		return "-"
	}
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
