package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/internal/controlplane"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/output"
)

// diffOptions are the flags of `kubeboot diff`.
type diffOptions struct {
	deps       deps
	configPath string
	root       string
	output     outputFormat
}

// newDiffCommand is `kubeboot diff`: what init or upgrade would change on
// this node, changing nothing. Like diff(1), it exits 0 when nothing would
// change and 1 when something would.
func newDiffCommand(d deps, stdout, stderr io.Writer) *cobra.Command {
	opts := &diffOptions{deps: d}
	cmd := &cobra.Command{
		Use:   "diff",
		Short: "Show what init or upgrade would change on this node (manifests, configuration files, certificates and kubeconfigs) and in its cluster's addons and the configuration's own manifests",
		Example: examples(
			"kubeboot diff --config cluster.yaml",
			"kubeboot diff --config join.yaml -o json",
			"kubeboot diff --root /srv/image --config node.yaml",
		),
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDiff(cmd.Context(), opts, stdout, stderr)
		},
	}
	addConfigFlag(cmd.Flags(), &opts.configPath)
	addRootFlag(cmd.Flags(), &opts.root)
	addOutputFlag(cmd.Flags(), &opts.output)
	return cmd
}

func runDiff(ctx context.Context, opts *diffOptions, stdout, stderr io.Writer) error {
	r, err := opts.deps.renderSpec(opts.configPath, opts.root) // a joined node too
	if err != nil {
		return err
	}
	s, err := opts.deps.node(r, output.NewReporter(stderr, false), stdout)
	if err != nil {
		return err
	}
	diffs, err := controlplane.DiffNode(ctx, s, opts.root != "")
	if err != nil {
		return err
	}
	if err := printDifferences(stdout, diffs, opts.output.json()); err != nil {
		return err
	}
	if len(diffs) > 0 {
		return &exitError{code: exit.Failure, msg: fmt.Sprintf("%d file(s) or addon object(s) would change", len(diffs))}
	}
	return nil
}

// printDifferences prints the unified diffs of the text files and one
// comment line per certificate, key or kubeconfig; with JSON, one object
// per difference and a final result.
func printDifferences(w io.Writer, diffs []controlplane.Difference, asJSON bool) error {
	var b strings.Builder
	if asJSON {
		enc := json.NewEncoder(&b)
		for _, d := range diffs {
			if err := enc.Encode(d); err != nil {
				return fmt.Errorf("encode difference of %q: %w", d.Path, err)
			}
		}
		if err := enc.Encode(map[string]any{"result": map[string]any{"changed": len(diffs) > 0, "differences": len(diffs)}}); err != nil {
			return fmt.Errorf("encode diff result: %w", err)
		}
	} else {
		for _, d := range diffs {
			switch {
			case d.Diff != "":
				b.WriteString(d.Diff)
			case d.Reason != "":
				fmt.Fprintf(&b, "# %s: would %s: %s\n", d.Path, d.Change, d.Reason)
			default:
				fmt.Fprintf(&b, "# %s: would %s\n", d.Path, d.Change)
			}
		}
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("print differences: %w", err)
	}
	return nil
}
