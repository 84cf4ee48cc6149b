package app

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"
	"golang.org/x/term"
	"k8s.io/client-go/kubernetes"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/inputfile"
	"github.com/kubeboot/kubeboot/internal/workflow"
)

// The shared flags: each is registered by one helper, with one help text.

// stdoutTarget is the value of a flag naming a file to write (--out,
// --discovery-file) that writes to stdout instead.
const stdoutTarget = "-"

// isTerminal says whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// outputFormat is the value of -o: text or json.
type outputFormat string

func (o *outputFormat) String() string { return string(*o) }

func (o *outputFormat) Set(s string) error {
	if s != "text" && s != "json" {
		return fmt.Errorf("want text or json, got %q", s)
	}
	*o = outputFormat(s)
	return nil
}

func (o *outputFormat) Type() string { return "text|json" }

// json says whether -o json was given.
func (o outputFormat) json() bool { return o == "json" }

// addOutputFlag registers -o, --output.
func addOutputFlag(flags *pflag.FlagSet, o *outputFormat) {
	*o = "text"
	flags.VarP(o, "output", "o", "output format: text, or json (machine-readable: one JSON object per line)")
}

// addConfigFlag registers --config.
func addConfigFlag(flags *pflag.FlagSet, path *string) {
	flags.StringVar(path, "config", "", "the node's configuration file: a ClusterConfiguration (init; default: what kubeboot config print-defaults shows), a JoinConfiguration (join --control-plane, and later commands on that node) or a WorkerConfiguration (join of a worker)")
}

// addRootFlag registers --root.
func addRootFlag(flags *pflag.FlagSet, root *string) {
	flags.StringVar(root, "root", "", "the node's files are under this directory; manifests keep the node's own paths (offline image builds)")
}

// addDryRunFlag registers --dry-run.
func addDryRunFlag(flags *pflag.FlagSet, dryRun *bool) {
	flags.BoolVar(dryRun, "dry-run", false, "change nothing: report every file that would be written or removed (init prints the manifests to stdout)")
}

// addControlPlaneFlag registers --control-plane, for the commands that join.
func addControlPlaneFlag(flags *pflag.FlagSet, controlPlane *bool) {
	flags.BoolVar(controlPlane, "control-plane", false, "join as a control-plane node, from a JoinConfiguration and a certificate bundle (without it: as a worker)")
}

// preflightFlags are the flags of the commands that run preflight checks.
type preflightFlags struct {
	strict       bool
	ignoreErrors []string
}

// add registers --strict and --ignore-preflight-errors.
func (p *preflightFlags) add(flags *pflag.FlagSet) {
	flags.BoolVar(&p.strict, "strict", false, "treat warnings as errors: preflight warnings, such as foreign files in the manifest directory, and a CA expiring within certificates.renewBefore")
	flags.StringSliceVar(&p.ignoreErrors, "ignore-preflight-errors", nil, "preflight checks to report as warnings only, e.g. Port-6443,EtcdDataDir, or all")
}

// ignored returns the check names to ignore, lower-cased as the checks compare them.
func (p preflightFlags) ignored() []string {
	var names []string
	for _, name := range p.ignoreErrors {
		names = append(names, strings.ToLower(name))
	}
	return names
}

// absRoot makes --root absolute, so that every path derived from it is.
func absRoot(root string) (string, error) {
	if root == "" || filepath.IsAbs(root) {
		return root, nil
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", &exit.UsageError{Msg: "--root " + root + ": " + err.Error()}
	}
	return abs, nil
}

// absConfig is the configuration file's absolute path, for the units
// that name it (workflow.Options.ConfigFile); empty for the defaults.
func absConfig(path string) string {
	if abs, err := filepath.Abs(path); err == nil && path != "" {
		return abs
	}
	return path
}

// load loads the configuration file at path, of one of kinds (none: any).
func (d deps) load(path string, kinds ...string) (config.Document, error) {
	return config.Load(path, d.configEnv(kinds...))
}

// loadCluster loads a ClusterConfiguration; no path means the defaults.
func (d deps) loadCluster(path string) (*config.ClusterConfiguration, error) {
	doc, err := d.load(path, config.KindClusterConfiguration)
	return doc.Cluster, err
}

// loadNode loads the configuration of a node however it came up: a
// ClusterConfiguration or a JoinConfiguration. No path means the defaults.
func (d deps) loadNode(path string) (*config.ClusterConfiguration, error) {
	doc, err := d.load(path, config.KindClusterConfiguration, config.KindJoinConfiguration)
	return doc.ControlPlane(), err
}

// nodeSpec is the runSpec of a command that works on a node however it came
// up (either kind of configuration), under root when given: the files are
// found there, and host checks are off.
func (d deps) nodeSpec(configPath, root string) (runSpec, error) {
	root, err := absRoot(root)
	if err != nil {
		return runSpec{}, err
	}
	cfg, err := d.loadNode(configPath)
	if err != nil {
		return runSpec{}, err
	}
	return runSpec{config: cfg, root: root, options: workflow.Options{Offline: root != ""}}, nil
}

// renderSpec is the runSpec of a command that renders the node's manifests
// in memory and writes nothing (diff, images list): a nodeSpec in dry-run
// mode whose patchesDir exists.
func (d deps) renderSpec(configPath, root string) (runSpec, error) {
	r, err := d.nodeSpec(configPath, root)
	if err != nil {
		return runSpec{}, err
	}
	r.options.DryRun = true
	return r, config.CheckPatchesDir(r.config, configPath, r.root)
}

// loadJoin loads the JoinConfiguration that join needs, with the
// discovery settings of its command line over the file's.
func (d deps) loadJoin(path string, discovery config.Discovery, certificateKey string) (*config.JoinConfiguration, error) {
	if path == "" {
		return nil, &exit.UsageError{Msg: "join needs --config: a JoinConfiguration file"}
	}
	env := d.configEnv(config.KindJoinConfiguration)
	env.JoinDiscovery, env.JoinCertificateKey = &discovery, certificateKey
	doc, err := config.Load(path, env)
	return doc.Join, err
}

// kubeconfigClient is the API client of an administrator's kubeconfig at
// path (--kubeconfig), for the commands that act on the cluster from any
// machine. The file is read as a configuration is, within bounds (no
// FIFO, no oversized or overly nested YAML); one that cannot be read, or
// that no client can be built from, is a usage error naming it.
func (d deps) kubeconfigClient(path string) (kubernetes.Interface, error) {
	data, err := inputfile.ReadYAML(path, inputfile.ConfigLimit, inputfile.ConfigNodes)
	if err != nil {
		return nil, &exit.UsageError{Msg: "--kubeconfig: " + err.Error()}
	}
	client, err := d.adminClient(data)
	if err != nil {
		return nil, &exit.UsageError{Msg: fmt.Sprintf("--kubeconfig %s: %v", path, err)}
	}
	return client, nil
}

// configOrKubeconfig refuses --config beside --kubeconfig: a command that
// acts on the cluster takes the node's configuration (on a control-plane
// node) or an administrator's kubeconfig, not both.
func configOrKubeconfig(configPath, kubeconfig string) error {
	if configPath != "" && kubeconfig != "" {
		return &exit.UsageError{Msg: "--config and --kubeconfig: give one, the node's configuration (on a control-plane node) or an administrator's kubeconfig"}
	}
	return nil
}
