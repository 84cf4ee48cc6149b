package app

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/files"
	"github.com/kubeboot/kubeboot/internal/imagebundle"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/phases"
)

// bundleOptions are the flags of `kubeboot images export` and `import`.
type bundleOptions struct {
	deps       deps
	configPath string
	endpoint   string
	platform   string
	output     outputFormat
	// bundle is the bundle file: export's --out, import's argument.
	bundle string
	// from is export's --from.
	from string
}

// bundleResult is the final object of images export and import with -o json.
type bundleResult struct {
	OK     bool                `json:"ok"`
	Error  string              `json:"error,omitempty"`
	Bundle string              `json:"bundle"`
	Images []imagebundle.Image `json:"images"`
}

// addBundleFlags adds the flags export and import share.
func addBundleFlags(flags *pflag.FlagSet, opts *bundleOptions) {
	addConfigFlag(flags, &opts.configPath)
	addOutputFlag(flags, &opts.output)
	flags.StringVar(&opts.endpoint, "runtime-endpoint", "", "containerd's socket URL (default: --config's kubelet.containerRuntimeEndpoint, else "+imagebundle.DefaultEndpoint+")")
	flags.StringVar(&opts.platform, "platform", "", "the node's platform, os/arch[/variant]: the manifest picked from a multi-platform image, and the platform every image must be of (default: linux and this kubeboot's architecture)")
}

// newImagesExportCommand is `kubeboot images export`.
func newImagesExportCommand(d deps, stdout, stderr io.Writer) *cobra.Command {
	opts := &bundleOptions{deps: d}
	cmd := &cobra.Command{
		Use:   "export [IMAGE...] --out FILE",
		Short: "Write the images of images list (and any IMAGE named) into one bundle, an OCI image layout in a tar, for a node without a registry",
		Long: "export reads every image the node needs (images list: with --config, its configuration's; with IMAGEs alone, those)\n" +
			"from the local containerd's content store (--from runtime, namespace k8s.io) or from their registries\n" +
			"(--from registry), the manifest of --platform picked from a multi-platform image, and writes them into --out:\n" +
			"an OCI image layout in a tar, its members sorted and dated alike, so the same images give the same bytes.\n" +
			"images import loads it on the node; ctr -n k8s.io images import takes it too.",
		Example: examples(
			"kubeboot images export --config cluster.yaml --from registry --out images.tar",
			"kubeboot images export --config cluster.yaml --out images.tar",
			"kubeboot images export --from registry --out extra.tar docker.io/calico/node:v3.31.0",
		),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBundleCommand(opts, "images export", stdout, stderr, func(report *output.Reporter) ([]imagebundle.Image, error) {
				images, err := exportBundle(cmd.Context(), opts, args)
				for _, img := range images {
					report.Infof("%s: exported (%s, %d bytes)", img.Ref, img.Digest, img.Size)
				}
				return images, err
			})
		},
	}
	addBundleFlags(cmd.Flags(), opts)
	cmd.Flags().StringVar(&opts.bundle, "out", "", "the bundle file to write (required)")
	cmd.Flags().StringVar(&opts.from, "from", imagebundle.FromRuntime, "where to read the images: runtime (the node's containerd) or registry")
	return cmd
}

// newImagesImportCommand is `kubeboot images import`.
func newImagesImportCommand(d deps, stdout, stderr io.Writer) *cobra.Command {
	opts := &bundleOptions{deps: d}
	cmd := &cobra.Command{
		Use:   "import FILE",
		Short: "Load a bundle of images export into the node's containerd (namespace k8s.io), unpacked, so the kubelet runs them without a pull",
		Long: "import first verifies the whole bundle: its members' names, every blob's digest and size against the manifests,\n" +
			"every image complete and of --platform, and with --config that it holds every image the node needs (images\n" +
			"list). A bundle that fails any check is refused (exit 2), naming the file and the image, and nothing is\n" +
			"imported. Then it loads the bundle into containerd, in the namespace the kubelet's CRI uses, and unpacks each\n" +
			"image into containerd's default snapshotter.",
		Example: examples(
			"kubeboot images import images.tar --config cluster.yaml",
			"kubeboot images import images.tar --runtime-endpoint unix:///run/containerd/containerd.sock -o json",
		),
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.bundle = args[0]
			return runBundleCommand(opts, "images import", stdout, stderr, func(report *output.Reporter) ([]imagebundle.Image, error) {
				return importBundle(cmd.Context(), opts, report)
			})
		},
	}
	addBundleFlags(cmd.Flags(), opts)
	return cmd
}

// runBundleCommand runs export or import and reports its images: a line
// each, or with -o json the result.
func runBundleCommand(opts *bundleOptions, phase string, stdout, stderr io.Writer, run func(*output.Reporter) ([]imagebundle.Image, error)) error {
	report := reporter(opts.output, stdout, stderr)
	report.SetPhase(phase)
	images, err := run(report)
	res := bundleResult{OK: err == nil, Bundle: opts.bundle, Images: images}
	if res.Images == nil {
		res.Images = []imagebundle.Image{}
	}
	if err != nil {
		res.Error = err.Error()
	}
	report.PrintResult(res)
	return err
}

// exportBundle writes the bundle of the node's images and args'.
func exportBundle(ctx context.Context, opts *bundleOptions, args []string) ([]imagebundle.Image, error) {
	if opts.bundle == "" || opts.bundle == "-" {
		return nil, &exit.UsageError{Msg: fmt.Sprintf("--out %q: want the path of the bundle file to write", opts.bundle)}
	}
	if err := files.CheckTarget("--out", opts.bundle); err != nil {
		return nil, err
	}
	refs := args
	endpoint := opts.endpoint
	if opts.configPath != "" || len(args) == 0 {
		needed, cfgEndpoint, err := nodeImages(opts)
		if err != nil {
			return nil, err
		}
		refs = slices.Concat(needed, args)
		endpoint = cmp.Or(endpoint, cfgEndpoint)
	}
	return imagebundle.ExportFile(ctx, opts.bundle, imagebundle.ExportOptions{Refs: refs, From: opts.from, Endpoint: endpoint, Platform: opts.platform})
}

// importBundle verifies the bundle, with --config checks that it holds
// every image the node needs, and loads it.
func importBundle(ctx context.Context, opts *bundleOptions, report *output.Reporter) ([]imagebundle.Image, error) {
	b, err := imagebundle.Open(opts.bundle, opts.platform)
	if err != nil {
		return nil, err
	}
	defer func() { _ = b.Close() }()
	endpoint := opts.endpoint
	if opts.configPath != "" {
		needed, cfgEndpoint, err := nodeImages(opts)
		if err != nil {
			return nil, err
		}
		missing, err := imagebundle.Missing(b.Images, needed)
		if err != nil {
			return nil, err
		}
		if len(missing) > 0 {
			return nil, &exit.UsageError{Msg: fmt.Sprintf("image bundle %q lacks %v, which the node of --config %q needs (images list): nothing was imported; export the bundle again with this --config", b.Path, missing, opts.configPath)}
		}
		endpoint = cmp.Or(endpoint, cfgEndpoint)
	}
	return imagebundle.Import(ctx, b, endpoint, func(img imagebundle.Image) {
		report.Infof("%s: imported and unpacked (%s)", img.Ref, img.Digest)
	})
}

// nodeImages are the images of images list for --config (none: the
// defaults), and the node's runtime endpoint.
func nodeImages(opts *bundleOptions) ([]string, string, error) {
	r, err := opts.deps.renderSpec(opts.configPath, "")
	if err != nil {
		return nil, "", err
	}
	s, err := opts.deps.node(r, output.NewReporter(io.Discard, false), io.Discard)
	if err != nil {
		return nil, "", err
	}
	images, err := phases.Images(s)
	return images, r.config.Kubelet.ContainerRuntimeEndpoint, err
}
