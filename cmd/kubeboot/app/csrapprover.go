package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/csrapprover"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/inputfile"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/phases"
)

// csrApproverOptions are the flags of `kubeboot csr-approver`, which the
// kubeboot-csr-approver static pod runs.
type csrApproverOptions struct {
	kubeconfig  string
	bindAddress string
	healthPort  int
	// recheck is how often the kubeconfig is read again to notice a
	// renewal.
	recheck time.Duration
}

// errKubeconfigChanged ends a run whose kubeconfig was renewed.
var errKubeconfigChanged = errors.New("kubeconfig changed")

// kubeconfigRecheck is how often csr-approver reads its kubeconfig again.
const kubeconfigRecheck = 30 * time.Second

func newCSRApproverCommand(stderr io.Writer) *cobra.Command {
	opts := &csrApproverOptions{recheck: kubeconfigRecheck}
	cmd := &cobra.Command{
		Use:     "csr-approver",
		Short:   "Approve the kubelet serving certificates nodes ask for their own addresses, and deny the others (the kubeboot-csr-approver static pod runs this)",
		Example: examples("kubeboot csr-approver --kubeconfig /etc/kubernetes/csr-approver.conf --bind-address 127.0.0.1 --health-port 10270"),
		Long: "Watches the kubernetes.io/kubelet-serving CertificateSigningRequests and approves each one that a node\n" +
			"(system:node:<name>, group system:nodes) posts for CN=system:node:<name>, O=system:nodes, with the serving\n" +
			"usages and only DNS names and IPs among its Node's addresses; every other one is denied, with the reason.\n" +
			"Runs until SIGINT or SIGTERM. Serves /healthz and /readyz in plain HTTP on --bind-address:--health-port.\n" +
			"Exits 0 when its kubeconfig changes (a renewal), for the kubelet to start it again with the new one.",
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.healthPort < 1 || opts.healthPort > 65535 {
				return &exit.UsageError{Msg: fmt.Sprintf("--health-port %d: not a port", opts.healthPort)}
			}
			report := output.NewReporter(stderr, false)
			report.SetPhase("csr-approver")
			return opts.run(cmd.Context(), report)
		},
	}
	flags := cmd.Flags()
	flags.StringVar(&opts.kubeconfig, "kubeconfig", config.DefaultKubeconfigDir+"/"+config.KubeconfigCSRApprover, "the approver's kubeconfig (user kubeboot:csr-approver, which the csr-approver phase grants what it needs)")
	flags.StringVar(&opts.bindAddress, "bind-address", "127.0.0.1", "the address of /healthz and /readyz")
	flags.IntVar(&opts.healthPort, "health-port", config.PortCSRApprover, "the port of /healthz and /readyz (plain HTTP)")
	return cmd
}

// run serves the health endpoints and runs the controller until ctx is
// done or the kubeconfig changes.
func (o *csrApproverOptions) run(ctx context.Context, report *output.Reporter) error {
	kubeconfig, err := inputfile.ReadYAML(o.kubeconfig, inputfile.ConfigLimit, inputfile.ConfigNodes)
	if err != nil {
		return fmt.Errorf("read kubeconfig %q: %w", o.kubeconfig, err)
	}
	client, err := phases.NewClient(kubeconfig, "")
	if err != nil {
		return fmt.Errorf("load kubeconfig %q: %w", o.kubeconfig, err)
	}
	controller := csrapprover.New(client, csrapprover.Options{Log: func(line string) { report.Infof("%s", line) }})
	addr, stop, err := serveHealth(ctx, o.bindAddress, o.healthPort, controller.Handler(), report)
	if err != nil {
		return err
	}
	defer stop()

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go o.watchKubeconfig(ctx, kubeconfig, cancel)
	report.Infof("deciding the kubernetes.io/kubelet-serving CSRs with %s; health on http://%s/healthz and /readyz", o.kubeconfig, addr)
	if err := controller.Run(ctx); err != nil {
		return err
	}
	if errors.Is(context.Cause(ctx), errKubeconfigChanged) {
		report.Infof("%s changed: exiting, for the kubelet to start the approver with the new one", o.kubeconfig)
		return nil
	}
	report.Infof("stopped")
	return nil
}

// watchKubeconfig cancels the run once the kubeconfig's content is no
// longer what the run started with: the client keeps the credentials it
// was built with, so a renewed certificate takes a new process. A file
// that cannot be read for a moment is read again at the next check.
func (o *csrApproverOptions) watchKubeconfig(ctx context.Context, started []byte, cancel context.CancelCauseFunc) {
	ticker := time.NewTicker(o.recheck)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			now, err := inputfile.ReadYAML(o.kubeconfig, inputfile.ConfigLimit, inputfile.ConfigNodes)
			if err == nil && !bytes.Equal(now, started) {
				cancel(errKubeconfigChanged)
				return
			}
		}
	}
}
