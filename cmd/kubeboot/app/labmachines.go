package app

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/exit"
	"github.com/kubeboot/kubeboot/lab"
	"github.com/kubeboot/kubeboot/machine"
	"github.com/kubeboot/kubeboot/output"
)

// machineLab is the machine lab of the description at path, whose nodes
// install this kubeboot binary and the binaries of binDir.
func machineLab(path, binDir string) (lab.MachineLab, error) {
	c, err := lab.LoadCluster(path)
	if err != nil {
		return lab.MachineLab{}, &exit.UsageError{Msg: err.Error()}
	}
	if !c.Machines {
		return lab.MachineLab{}, &exit.UsageError{Msg: path + ": machines: the lab's nodes are not machines, so they neither reboot nor run commands: set machines: true and bring the lab up again"}
	}
	self, err := os.Executable()
	if err != nil {
		return lab.MachineLab{}, err
	}
	if binDir, err = filepath.Abs(binDir); err != nil {
		return lab.MachineLab{}, err
	}
	return lab.MachineLab{Cluster: c, BinDir: binDir, Kubeboot: self}, nil
}

// machinesUp runs `lab up --cluster` of a machine lab: each node's
// progress, as its events arrive, then the result.
func machinesUp(ctx context.Context, l lab.MachineLab, report *output.Reporter) error {
	events := make(chan lab.Event)
	var res lab.Result
	var err error
	go func() {
		res, err = l.Up(ctx, events)
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
	return err
}

// newLabRebootCommand is `kubeboot lab reboot NODE`.
func newLabRebootCommand(opts *labOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "reboot NODE",
		Short: "Reboot a node of a lab of machines: its systemd stops every service, and the machine boots again with its disk",
		Args:  usageArgs(cobra.ExactArgs(1)),
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
		Short: "Run a command inside a node of a lab of machines (in all its namespaces), as docker exec does for kind; its exit code is the command's",
		Args:  usageArgs(cobra.MinimumNArgs(2)),
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

// machine is the named node of --cluster's machine lab.
func (o *labOptions) machine(name string) (machine.Machine, error) {
	if o.clusterPath == "" {
		return machine.Machine{}, &exit.UsageError{Msg: "--cluster names the lab of machines the node is in"}
	}
	l, err := machineLab(o.clusterPath, o.binDir)
	if err != nil {
		return machine.Machine{}, err
	}
	m, err := l.Machine(name)
	if err != nil {
		return machine.Machine{}, &exit.UsageError{Msg: err.Error()}
	}
	return m, nil
}
