package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/fleet"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/tokens"
)

func newConfigCommand(d deps, stdout, stderr io.Writer) *cobra.Command {
	cmd := groupCommand("config", "Print and check kubeboot configuration files")
	cmd.Example = examples(
		"kubeboot config print-defaults > cluster.yaml",
		"kubeboot config validate cluster.yaml",
		"kubeboot config fleet --cluster fleet.yaml --out /srv/fleet",
		"kubeboot config serve --dir /srv/fleet --listen 10.0.0.2:8443",
	)
	cmd.AddCommand(newConfigFleetCommand(d, stdout), newConfigServeCommand(stdout, stderr), &cobra.Command{
		Use:     "print-defaults",
		Short:   "Print a ClusterConfiguration with every default filled in for this host",
		Example: examples("kubeboot config print-defaults > cluster.yaml"),
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			c, err := d.loadCluster("")
			if err != nil {
				return err
			}
			out, err := config.Marshal(c)
			if err != nil {
				return err
			}
			_, err = stdout.Write(out)
			return err
		},
	}, &cobra.Command{
		Use:   "validate FILE",
		Short: "Check a ClusterConfiguration, JoinConfiguration or WorkerConfiguration file strictly and report every problem",
		Example: examples(
			"kubeboot config validate cluster.yaml",
			"kubeboot config validate worker.yaml",
		),
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(_ *cobra.Command, args []string) error {
			if _, err := d.load(args[0]); err != nil {
				return err
			}
			_, err := fmt.Fprintf(stdout, "%s is valid\n", args[0])
			return err
		},
	})
	return cmd
}

// configFleetOptions are the flags of `kubeboot config fleet`.
type configFleetOptions struct {
	cluster, out, kubeconfig string
	output                   outputFormat
}

// configFleetResult is what `kubeboot config fleet -o json` prints: what
// was written and, with --kubeconfig, each worker's admission.
type configFleetResult struct {
	*fleet.Result
	Admitted []tokens.Admission `json:"admitted,omitempty"`
}

// newConfigFleetCommand is `kubeboot config fleet`.
func newConfigFleetCommand(d deps, stdout io.Writer) *cobra.Command {
	opts := &configFleetOptions{}
	cmd := &cobra.Command{
		Use:   "fleet --cluster FILE --out DIR",
		Short: "Write every node's file of a fleet, with the token, certificate key and CA they share, made once",
		Example: examples(
			"kubeboot config fleet --cluster examples/fleet.yaml --out /srv/fleet",
			"kubeboot config fleet --cluster fleet.yaml --out /srv/fleet -o json",
			"kubeboot config fleet --cluster fleet.yaml --out /srv/fleet --kubeconfig admin.conf",
		),
		Long: "fleet reads a Fleet (examples/fleet.yaml: the cluster's settings and its nodes) and writes into DIR every\n" +
			"node's file, nodes/<name>.yaml (mode 0600): the first control-plane node's ClusterConfiguration, carrying the\n" +
			"cluster CA, the other control-plane nodes' JoinConfiguration and the workers' WorkerConfiguration, pinning that\n" +
			"CA. The secrets they share are made on the first run and kept in DIR: bootstrap-token, certificate-key, node-tokens,\n" +
			"ca.crt and ca.key (0600), and ca-cert-hash, the pin; and the fleet's config CA, which signs the node files and\n" +
			"issues config serve's certificate, apart from the cluster's so that a rotation of that one leaves the machines'\n" +
			"pin alone: config-ca.crt, config-ca.key (0600) and config-ca-hash, the pin a machine that fetches its file is\n" +
			"given (kubeboot.config-ca-hash=). A second run changes no byte; a node added to the description\n" +
			"gets its file alone. Every node's file is checked as its node will load it, and nothing is written unless all are\n" +
			"valid.\n\n" +
			"Each worker joins with a token bound to it alone, which the first control-plane node's init creates. A worker\n" +
			"added after that node's file was written is not in it: --kubeconfig (an administrator's kubeconfig of the running\n" +
			"cluster) makes its token there, and makes an expired token of a worker that has not joined valid again.",
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.cluster == "" || opts.out == "" {
				return &exit.UsageError{Msg: "--cluster and --out are required: kubeboot config fleet --cluster fleet.yaml --out DIR"}
			}
			r, err := opts.run(cmd.Context(), d)
			if err != nil {
				return err
			}
			if opts.output == "json" {
				return json.NewEncoder(stdout).Encode(r)
			}
			return r.print(stdout)
		},
	}
	cmd.Flags().StringVar(&opts.cluster, "cluster", "", "the fleet's description (kind Fleet)")
	cmd.Flags().StringVar(&opts.out, "out", "", "the directory of the fleet's files and secrets; made if missing")
	cmd.Flags().StringVar(&opts.kubeconfig, "kubeconfig", "", "an administrator's kubeconfig of the running cluster, in which to make the tokens of the workers that have not joined")
	addOutputFlag(cmd.Flags(), &opts.output)
	return cmd
}

// run writes the fleet's files and, with --kubeconfig, admits its workers.
// The kubeconfig is read before anything is written, so a bad one changes
// nothing.
func (o *configFleetOptions) run(ctx context.Context, d deps) (*configFleetResult, error) {
	var client kubernetes.Interface
	if o.kubeconfig != "" {
		var err error
		if client, err = d.kubeconfigClient(o.kubeconfig); err != nil {
			return nil, err
		}
	}
	desc, err := fleet.Load(o.cluster)
	if err != nil {
		return nil, err
	}
	plan, err := fleet.NewPlan(desc, o.out)
	if err != nil {
		return nil, err
	}
	written, err := plan.Write()
	if err != nil {
		return nil, err
	}
	r := &configFleetResult{Result: written}
	if client != nil {
		if r.Admitted, err = tokens.AdmitWorkers(ctx, client, plan.Workers, time.Now()); err != nil {
			return nil, fmt.Errorf("the fleet's files are written; admit its workers in the cluster of --kubeconfig %s: %w", o.kubeconfig, err)
		}
	}
	return r, nil
}

// print says what was written and, worker by worker, what became of the
// tokens of the ones added after the first node's file.
func (r *configFleetResult) print(w io.Writer) error {
	var lines []string
	for _, name := range r.Written {
		lines = append(lines, "wrote "+filepath.Join(r.Dir, name))
	}
	lines = append(lines, fmt.Sprintf("%d files written, %d unchanged; the nodes pin the CA %s, the machines that fetch their files the config CA %s", len(r.Written), len(r.Unchanged), r.CACertHash, r.ConfigCAHash))
	for _, a := range r.Admitted {
		if a.Result == tokens.Joined {
			lines = append(lines, fmt.Sprintf("worker %s has joined: its token %s is spent", a.Node, a.TokenID))
			continue
		}
		lines = append(lines, fmt.Sprintf("worker %s: token %s %s in the cluster, valid until %s", a.Node, a.TokenID, a.Result, a.Expires.Format(time.RFC3339)))
	}
	if r.Admitted == nil {
		for _, name := range r.ToAdmit {
			lines = append(lines, fmt.Sprintf("worker %s joins once its token is in the cluster: the first control-plane node's file, written before it, does not list it; run this again with --kubeconfig (an administrator's kubeconfig)", name))
		}
	}
	_, err := fmt.Fprintln(w, strings.Join(lines, "\n"))
	return err
}

// configServeOptions are the flags of `kubeboot config serve`.
type configServeOptions struct {
	dir, listen string
	names       []string
	output      outputFormat
}

// newConfigServeCommand is `kubeboot config serve`.
func newConfigServeCommand(stdout, stderr io.Writer) *cobra.Command {
	opts := &configServeOptions{}
	cmd := &cobra.Command{
		Use:   "serve --dir DIR --listen ADDR",
		Short: "Serve a fleet's node files over TLS to the machines that boot without one, by MAC address or host name",
		Example: examples(
			"kubeboot config serve --dir /srv/fleet --listen 10.0.0.2:8443",
			"kubeboot config serve --dir /srv/fleet --listen :8443 --name 10.0.0.2 --name boot.example -o json",
		),
		Long: "serve answers GET " + fleet.NodeFilePath + "?mac=<mac>&hostname=<name> with that machine's file of the fleet that\n" +
			"`kubeboot config fleet` wrote into DIR (by its mac in the fleet's description, else by its name), and the\n" +
			"file's signature by the fleet's config CA. Its TLS certificate is issued by that CA at each start, for --listen's\n" +
			"address and each --name, and sent with the CA's, so a machine booted with kubeboot.config=https://ADDR" + fleet.NodeFilePath + "?mac={mac}\n" +
			"and kubeboot.config-ca-hash=<DIR/config-ca-hash> trusts it and nothing else. It reads DIR at every request, logs\n" +
			"every file it serves and every machine it has none for, and runs until interrupted.",
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return opts.run(cmd.Context(), stdout, stderr)
		},
	}
	flags := cmd.Flags()
	flags.StringVar(&opts.dir, "dir", "", "the fleet's directory, as `kubeboot config fleet --out` wrote it")
	flags.StringVar(&opts.listen, "listen", "", "the address and port to serve on, like 10.0.0.2:8443")
	flags.StringArrayVar(&opts.names, "name", nil, "an address or DNS name the machines reach the server by, for its certificate (repeatable; default: --listen's address)")
	addOutputFlag(flags, &opts.output)
	return cmd
}

// run serves until ctx ends.
func (o *configServeOptions) run(ctx context.Context, stdout, stderr io.Writer) error {
	if o.dir == "" || o.listen == "" {
		return &exit.UsageError{Msg: "--dir and --listen are required: kubeboot config serve --dir /srv/fleet --listen 10.0.0.2:8443"}
	}
	host, _, err := net.SplitHostPort(o.listen)
	if err != nil {
		return &exit.UsageError{Msg: fmt.Sprintf("--listen %q: want address:port, like 10.0.0.2:8443", o.listen)}
	}
	names := o.names
	if ip := net.ParseIP(host); len(names) == 0 && ip != nil && !ip.IsUnspecified() {
		names = []string{host}
	}
	if len(names) == 0 {
		return &exit.UsageError{Msg: fmt.Sprintf("--listen %s names no address the machines reach: give them with --name, like --name 10.0.0.2", o.listen)}
	}
	tlsConfig, err := fleet.ServingTLS(o.dir, names)
	if err != nil {
		return err
	}
	listener, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	report := reporter(o.output, stdout, stderr)
	server := &http.Server{
		Handler:           fleet.Server{Dir: o.dir, Log: report.Infof},
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 10 * time.Second,
		// The server's own complaints (a handshake a machine gave up) go
		// out as warnings, in the same stream.
		ErrorLog: log.New(warnings{report}, "", 0),
	}
	served := make(chan error, 1)
	go func() { served <- server.ServeTLS(listener, "", "") }()
	report.Infof("serving %s on https://%s%s for %s", o.dir, listener.Addr(), fleet.NodeFilePath, strings.Join(names, ", "))
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return server.Shutdown(shutdown)
	}
}

// warnings writes each line it is given as a warning event.
type warnings struct{ report *output.Reporter }

func (w warnings) Write(p []byte) (int, error) {
	w.report.Warnf("%s", strings.TrimSpace(string(p)))
	return len(p), nil
}
