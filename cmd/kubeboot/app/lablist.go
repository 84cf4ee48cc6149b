package app

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/internal/lab"
	"github.com/kubeboot/kubeboot/internal/output"
)

// newLabListCommand is `kubeboot lab list`.
func newLabListCommand(stdout io.Writer) *cobra.Command {
	var format outputFormat
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the labs that are up on this machine: name, nodes, endpoint, age and description",
		Long: "list shows every lab that `lab up` brought up on this machine and `lab down` has not removed (they are\n" +
			"registered in " + lab.DefaultRegistry + "). Two labs run side by side when their names, dirs, subnets and\n" +
			"pod subnets differ; `lab up` refuses one that would collide with a lab listed here.",
		Example: examples(
			"kubeboot lab list",
			"kubeboot lab list -o json",
		),
		Args: usageArgs(cobra.NoArgs),
		RunE: func(_ *cobra.Command, _ []string) error {
			labs, err := lab.List(lab.DefaultRegistry)
			if err != nil {
				return err
			}
			if format.json() {
				output.NewReporter(stdout, true).PrintResult(labs)
				return nil
			}
			return printLabs(stdout, labs, time.Now())
		},
	}
	addOutputFlag(cmd.Flags(), &format)
	return cmd
}

// printLabs writes the labs as a table.
func printLabs(w io.Writer, labs []lab.Entry, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "NAME\tNODES\tENDPOINT\tPORTS\tAGE\tDESCRIPTION")
	for _, l := range labs {
		var ports []string
		for _, p := range l.HostPorts {
			ports = append(ports, strconv.Itoa(p))
		}
		if ports == nil {
			ports = []string{"-"}
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", l.Name, strings.Join(l.Nodes, ","), l.Endpoint, strings.Join(ports, ","), now.Sub(l.Started).Round(time.Second), l.Description)
	}
	return tw.Flush()
}
