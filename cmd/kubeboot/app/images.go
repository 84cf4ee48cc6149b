package app

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/output"
	"github.com/kubeboot/kubeboot/phases"
)

// imagesOptions are the flags of `kubeboot images list`.
type imagesOptions struct {
	configPath string
	root       string
	output     outputFormat
}

// newImagesCommand is `kubeboot images`: the container images a node needs.
func newImagesCommand(stdout, stderr io.Writer) *cobra.Command {
	opts := &imagesOptions{}
	cmd := groupCommand("images", "The container images this node's control plane runs")
	list := &cobra.Command{
		Use:   "list",
		Short: "List the images of this node's static pods, as rendered and patched (the runtime's own sandbox image aside)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			return runImagesList(opts, stdout, stderr)
		},
	}
	addConfigFlag(list.Flags(), &opts.configPath)
	addRootFlag(list.Flags(), &opts.root)
	addOutputFlag(list.Flags(), &opts.output)
	cmd.AddCommand(list)
	return cmd
}

func runImagesList(opts *imagesOptions, stdout, stderr io.Writer) error {
	root, err := absRoot(opts.root)
	if err != nil {
		return err
	}
	cfg, err := loadNode(opts.configPath)
	if err != nil {
		return err
	}
	if err := config.CheckPatchesDir(cfg, opts.configPath, root); err != nil {
		return err
	}
	r := run{config: cfg, root: root, options: phases.Options{DryRun: true, Offline: root != ""}}
	images, err := phases.Images(r.state(output.NewReporter(stderr, false), stdout))
	if err != nil {
		return err
	}
	if opts.output.json() {
		return json.NewEncoder(stdout).Encode(map[string][]string{"images": images})
	}
	_, err = fmt.Fprintln(stdout, strings.Join(images, "\n"))
	return err
}
