package app

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/lab"
	"github.com/kubeboot/kubeboot/internal/machine"
	"github.com/kubeboot/kubeboot/internal/output"
)

// labOptions are the flags of `kubeboot lab` and its subcommands.
type labOptions struct {
	clusterPath string
	binDir      string
	pkg         string
	output      outputFormat
}

// defaultLabPackage is where `make package` writes kubeboot's .deb.
const defaultLabPackage = "bin/kubeboot.deb"

func newLabCommand(stdout, stderr io.Writer) *cobra.Command {
	opts := &labOptions{}
	cmd := groupCommand("lab", "Run a lab cluster on this machine: nodes that are machines of their own, with systemd, containerd and the real kubelet")
	cmd.Example = examples(
		"kubeboot lab up --cluster examples/machines.yaml",
		"kubeboot lab exec --cluster examples/machines.yaml w1 -- systemctl status kubelet",
		"kubeboot lab down --cluster examples/machines.yaml",
	)
	cmd.Long = "lab runs the nodes a lab description lists (see examples/machines.yaml) as machines of their own on this\n" +
		"host: systemd as PID 1 (systemd-nspawn), containerd and the kubelet as its services, each node in a network\n" +
		"namespace of its own on the lab's bridge. Every node installs kubeboot's .deb (--package) at its first\n" +
		"boot and brings itself up through the package's kubeboot-bootstrap.service from its one file, as a\n" +
		"provisioned machine does; the images are built from the binaries in --bin-dir and loaded at boot, so\n" +
		"no registry is needed. See docs/lab.md."
	cmd.PersistentFlags().StringVar(&opts.clusterPath, "cluster", "", "the lab description (see examples/machines.yaml)")
	cmd.PersistentFlags().StringVar(&opts.binDir, "bin-dir", "", "directory of containerd, the kubelet, etcd and the Kubernetes binaries (default: $KUBEBOOT_BIN_DIR, else test/tools/bin)")
	up := &cobra.Command{
		Use:   "up --cluster F",
		Short: "Bring a lab up: its network, load balancer and machines, each node up by itself, the addons rolled out",
		Example: examples(
			"kubeboot lab up --cluster examples/machines.yaml",
			"kubeboot lab up --cluster examples/machines.yaml --bin-dir test/tools/bin --package bin/kubeboot.deb -o json",
		),
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := opts.lab()
			if err != nil {
				return err
			}
			report := output.NewReporter(stderr, false)
			if opts.output.json() {
				report = output.NewReporter(stdout, true)
			}
			return labUp(cmd, l, report)
		},
	}
	addOutputFlag(up.Flags(), &opts.output)
	up.Flags().StringVar(&opts.pkg, "package", defaultLabPackage, "kubeboot's .deb, which every node installs with dpkg (`make package` writes it)")
	down := &cobra.Command{
		Use:     "down --cluster F",
		Short:   "Remove a lab: every machine (its processes, cgroups, mounts and disk), the load balancer, the network and the lab's directory",
		Example: examples("kubeboot lab down --cluster examples/machines.yaml"),
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := opts.lab()
			if err != nil {
				return err
			}
			return l.Down(cmd.Context())
		},
	}
	cmd.AddCommand(up, down, newLabRebootCommand(opts), newLabExecCommand(opts, stdout, stderr),
		newLabLoadCommand(opts, stdout, stderr), newLabExportCommand(opts, stdout), newLabListCommand(stdout))
	return cmd
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

// binDirOrDefault is --bin-dir, else $KUBEBOOT_BIN_DIR, else the repository's
// test/tools/bin. The flag's default is resolved here, not at registration,
// so that the help and the generated reference do not show the environment.
func (o *labOptions) binDirOrDefault() string {
	if o.binDir != "" {
		return o.binDir
	}
	return envOr("KUBEBOOT_BIN_DIR", "test/tools/bin")
}

// lab is the lab of --cluster, whose nodes install kubeboot's package
// (lab up's --package) and the binaries of --bin-dir.
func (o *labOptions) lab() (lab.Lab, error) {
	if o.clusterPath == "" {
		return lab.Lab{}, &exit.UsageError{Msg: "--cluster names the lab's description (like examples/machines.yaml)"}
	}
	c, err := lab.LoadCluster(o.clusterPath)
	if err != nil {
		return lab.Lab{}, &exit.UsageError{Msg: err.Error()}
	}
	self, err := os.Executable()
	if err != nil {
		return lab.Lab{}, err
	}
	binDir, err := filepath.Abs(o.binDirOrDefault())
	if err != nil {
		return lab.Lab{}, err
	}
	pkg := o.pkg
	if pkg != "" {
		if pkg, err = filepath.Abs(pkg); err != nil {
			return lab.Lab{}, err
		}
	}
	return lab.Lab{Cluster: c, BinDir: binDir, Kubeboot: self, Package: pkg, Registry: lab.DefaultRegistry}, nil
}

// labUp runs `lab up`: each node's progress, as its events arrive, then
// the result, until the command's context ends (at SIGINT or SIGTERM).
func labUp(cmd *cobra.Command, l lab.Lab, report *output.Reporter) error {
	events := make(chan lab.Event)
	var res lab.Result
	var err error
	go func() {
		res, err = l.Up(cmd.Context(), events)
		close(events)
	}()
	for e := range events {
		phase := e.Phase
		if e.Node != "" {
			phase = e.Node + "/" + e.Phase
		}
		report.Event(output.Event{Phase: phase, Level: e.Level, Msg: e.Msg})
	}
	report.PrintResult(res)
	if refused, ok := errors.AsType[*lab.InputError](err); ok {
		return &exit.UsageError{Msg: refused.Error()}
	}
	return err
}

// newLabRebootCommand is `kubeboot lab reboot NODE`.
func newLabRebootCommand(opts *labOptions) *cobra.Command {
	return &cobra.Command{
		Use:     "reboot NODE",
		Short:   "Reboot a node of a lab: its systemd stops every service, and the machine boots again with its disk",
		Example: examples("kubeboot lab reboot --cluster examples/machines.yaml w1"),
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := opts.machine(args[0])
			if err != nil {
				return err
			}
			return m.Reboot(cmd.Context(), 30*time.Second)
		},
	}
}

// newLabExecCommand is `kubeboot lab exec NODE -- CMD [ARG...]`.
func newLabExecCommand(opts *labOptions, stdout, stderr io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "exec NODE -- CMD [ARG...]",
		Short: "Run a command inside a node of a lab (in all its namespaces), as docker exec does for kind; its exit code is the command's",
		Example: examples(
			"kubeboot lab exec --cluster examples/machines.yaml w1 -- systemctl status kubelet",
			"kubeboot lab exec --cluster examples/machines.yaml cp1 -- journalctl -u kubeboot-bootstrap",
		),
		Args: usageArgs(cobra.MinimumNArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := opts.machine(args[0])
			if err != nil {
				return err
			}
			err = m.Run(cmd.Context(), cmd.InOrStdin(), stdout, stderr, args[1:]...)
			if exited, ok := errors.AsType[*exec.ExitError](err); ok {
				return &exit.CommandExit{Code: exited.ExitCode()}
			}
			return err
		},
	}
}

// machine is the named node of --cluster's lab.
func (o *labOptions) machine(name string) (machine.Machine, error) {
	l, err := o.lab()
	if err != nil {
		return machine.Machine{}, err
	}
	m, err := l.Machine(name)
	if err != nil {
		return machine.Machine{}, &exit.UsageError{Msg: err.Error()}
	}
	return m, nil
}
