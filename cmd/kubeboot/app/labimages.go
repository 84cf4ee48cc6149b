package app

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/output"
)

// newLabLoadCommand is `kubeboot lab load ARCHIVE... [--nodes a,b]`.
func newLabLoadCommand(opts *labOptions, stdout, stderr io.Writer) *cobra.Command {
	var nodes []string
	var format outputFormat
	cmd := &cobra.Command{
		Use:   "load ARCHIVE... [--nodes a,b]",
		Short: "Put image archives (docker save's or OCI layouts) into every node's containerd, or those --nodes names, for pods to run at once",
		Long: "load imports each archive into the containerd of every node of the lab (or of --nodes), all nodes at once,\n" +
			"in the namespace the kubelet uses, as kind's load image-archive does. Every archive and node is checked\n" +
			"before any node is touched. A pod whose image is loaded runs it without a pull (imagePullPolicy\n" +
			"IfNotPresent, or a tag other than latest).\n\n" +
			"An ARCHIVE must be a regular file, which load reads more than once: a FIFO, such as bash's\n" +
			"<(docker save IMAGE), is refused at once; save the image to a file first (docker save -o app.tar IMAGE).",
		Example: examples(
			"kubeboot lab load --cluster examples/machines.yaml app.tar",
			"kubeboot lab load --cluster examples/machines.yaml --nodes w1,w2 app.tar tools.tar",
		),
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := opts.lab()
			if err != nil {
				return err
			}
			if err := l.CheckLoad(args, nodes); err != nil {
				return &exit.UsageError{Msg: err.Error()}
			}
			loaded, err := l.Load(cmd.Context(), args, nodes)
			if format.json() {
				output.NewReporter(stdout, true).PrintResult(loaded)
			} else {
				for _, n := range loaded {
					_, _ = fmt.Fprintf(stderr, "%s: %s\n", n.Node, strings.Join(n.Images, ", "))
				}
			}
			return err
		},
	}
	cmd.Flags().StringSliceVar(&nodes, "nodes", nil, "the nodes to load into, by name (default: every node)")
	addOutputFlag(cmd.Flags(), &format)
	return cmd
}

// newLabExportCommand is `kubeboot lab export logs [DIR]`.
func newLabExportCommand(opts *labOptions, stdout io.Writer) *cobra.Command {
	export := groupCommand("export", "Export what a lab holds")
	export.Example = examples("kubeboot lab export logs --cluster examples/machines.yaml")
	logs := &cobra.Command{
		Use:   "logs [DIR]",
		Short: "Collect every node's journals and pods' logs and the cluster's objects and events into one archive in DIR (default: the current directory)",
		Long: "logs writes kubeboot-lab-<name>-<time>.tar.gz into DIR and prints its path, <time> being the UTC time to the\n" +
			"microsecond (20060102-150405.000000), so that two exports never share a name: for every node its whole journal\n" +
			"and, apart, the kubelet's, containerd's and kubeboot's units', and its pods' logs (/var/log/pods); from the\n" +
			"first control-plane node, kubectl get dumps of the nodes, pods, events and workloads. What could not be\n" +
			"collected (a node that is not running, an API server down) is written as errors.txt beside the rest.",
		Example: examples(
			"kubeboot lab export logs --cluster examples/machines.yaml",
			"kubeboot lab export logs --cluster examples/machines.yaml /tmp/bug-report",
		),
		Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := opts.lab()
			if err != nil {
				return err
			}
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			path, err := l.ExportLogs(cmd.Context(), dir)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(stdout, path)
			return err
		},
	}
	export.AddCommand(logs)
	return export
}
