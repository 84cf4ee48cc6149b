package app

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/staticpod"
)

// validateOptions are the flags of `kubeboot validate`.
type validateOptions struct {
	output   outputFormat
	nodeName string
}

func newValidateCommand(stdout io.Writer) *cobra.Command {
	opts := &validateOptions{}
	cmd := &cobra.Command{
		Use:   "validate PATH...",
		Short: "Check static pod manifests, or a manifest directory, against the kubelet's rules",
		Example: examples(
			"kubeboot validate /etc/kubernetes/manifests",
			"kubeboot validate --node-name cp1 -o json kube-apiserver.yaml etcd.yaml",
		),
		Long: "validate decodes each manifest as the kubelet does, applies its pod checks and the rule that static pods\n" +
			"may not reference API objects, and exits 3 if the kubelet would reject any file. A directory is read as the\n" +
			"kubelet reads its manifest directory (every non-dot file), with findings for backup copies, duplicate pods,\n" +
			"subdirectories and oversized files.",
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(_ *cobra.Command, paths []string) error {
			if opts.nodeName == "" {
				opts.nodeName = config.DetectHost().Name
			}
			results, err := staticpod.ValidatePaths(paths, opts.nodeName)
			if err != nil {
				return err
			}
			if err := printResults(stdout, results, opts.output == "json"); err != nil {
				return err
			}
			var rejected int
			for _, r := range results {
				if !r.Accepted {
					rejected++
				}
			}
			if rejected > 0 {
				return &exitError{code: exit.Rejected, msg: fmt.Sprintf("the kubelet would reject %d of %d manifests", rejected, len(results))}
			}
			return nil
		},
	}
	addOutputFlag(cmd.Flags(), &opts.output)
	cmd.Flags().StringVar(&opts.nodeName, "node-name", "", "node name the kubelet appends to each pod name (default: the host name, lower-cased)")
	return cmd
}

func printResults(w io.Writer, results []staticpod.Result, asJSON bool) error {
	for _, r := range results {
		if asJSON {
			if err := json.NewEncoder(w).Encode(r); err != nil {
				return err
			}
			continue
		}
		verdict := "accepted"
		if !r.Accepted {
			verdict = "REJECTED"
		}
		if _, err := fmt.Fprintf(w, "%s: %s\n", r.File, verdict); err != nil {
			return err
		}
		for _, f := range r.Errors {
			if _, err := fmt.Fprintf(w, "  error: %s\n", f); err != nil {
				return err
			}
		}
		for _, f := range r.Warnings {
			if _, err := fmt.Fprintf(w, "  warning: %s\n", f); err != nil {
				return err
			}
		}
	}
	return nil
}
