package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/cri"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
)

// imagesOptions are the flags of `kubeboot images list`.
type imagesOptions struct {
	deps       deps
	configPath string
	root       string
	output     outputFormat
}

// newImagesCommand is `kubeboot images`: the container images a node needs.
func newImagesCommand(d deps, stdout, stderr io.Writer) *cobra.Command {
	opts := &imagesOptions{deps: d}
	cmd := groupCommand("images", "The container images this node's control plane and addons run")
	cmd.Example = examples(
		"kubeboot images list --config cluster.yaml",
		"kubeboot images pull --config cluster.yaml",
		"kubeboot images export --config cluster.yaml --from registry --out images.tar",
		"kubeboot images import images.tar --config cluster.yaml",
	)
	list := &cobra.Command{
		Use:   "list",
		Short: "List the images this node runs: its static pods', as rendered and patched, and the enabled addons' (the runtime's own sandbox image aside)",
		Example: examples(
			"kubeboot images list --config cluster.yaml",
			"kubeboot images list --config cluster.yaml -o json",
		),
		Args: usageArgs(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			return runImagesList(opts, stdout, stderr)
		},
	}
	addConfigFlag(list.Flags(), &opts.configPath)
	addRootFlag(list.Flags(), &opts.root)
	addOutputFlag(list.Flags(), &opts.output)
	pullOpts := &imagesPullOptions{deps: d}
	pull := &cobra.Command{
		Use:     "pull",
		Short:   "Make the node's container runtime (kubelet.containerRuntimeEndpoint) pull every image of images list it lacks, as the kubelet would",
		Example: examples("kubeboot images pull --config cluster.yaml"),
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runImagesPull(cmd.Context(), pullOpts, stdout, stderr)
		},
	}
	addConfigFlag(pull.Flags(), &pullOpts.configPath)
	addOutputFlag(pull.Flags(), &pullOpts.output)
	cmd.AddCommand(list, pull, newImagesExportCommand(d, stdout, stderr), newImagesImportCommand(d, stdout, stderr))
	return cmd
}

// imagesPullOptions are the flags of `kubeboot images pull`.
type imagesPullOptions struct {
	deps       deps
	configPath string
	output     outputFormat
}

// pullResult is the final object of images pull with -o json.
type pullResult struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	cri.PullResult
}

func runImagesPull(ctx context.Context, opts *imagesPullOptions, stdout, stderr io.Writer) error {
	report := reporter(opts.output, stdout, stderr)
	report.SetPhase("images pull")
	res := pullResult{PullResult: cri.PullResult{Pulled: []string{}, Present: []string{}}}
	err := pullImages(ctx, opts, report, &res.PullResult)
	res.OK = err == nil
	if err != nil {
		res.Error = err.Error()
	}
	report.PrintResult(res)
	return err
}

// pullImages makes the node's runtime pull the images it lacks.
func pullImages(ctx context.Context, opts *imagesPullOptions, report *output.Reporter, res *cri.PullResult) error {
	cfg, err := opts.deps.loadNode(opts.configPath)
	if err != nil {
		return err
	}
	if err := config.CheckPatchesDir(cfg, opts.configPath, ""); err != nil {
		return err
	}
	r := runSpec{config: cfg, options: workflow.Options{DryRun: true}}
	s, err := opts.deps.node(r, report, io.Discard)
	if err != nil {
		return err
	}
	needed, err := phases.Images(s)
	if err != nil {
		return err
	}
	images, err := cri.Dial(cfg.Kubelet.ContainerRuntimeEndpoint, func(p string) string { return p })
	if err != nil {
		return err
	}
	defer func() { _ = images.Close() }()
	*res, err = images.PullMissing(ctx, needed, report)
	return err
}

func runImagesList(opts *imagesOptions, stdout, stderr io.Writer) error {
	r, err := opts.deps.renderSpec(opts.configPath, opts.root)
	if err != nil {
		return err
	}
	s, err := opts.deps.node(r, output.NewReporter(stderr, false), stdout)
	if err != nil {
		return err
	}
	images, err := phases.Images(s)
	if err != nil {
		return err
	}
	if opts.output.json() {
		return json.NewEncoder(stdout).Encode(map[string][]string{"images": images})
	}
	_, err = fmt.Fprintln(stdout, strings.Join(images, "\n"))
	return err
}
