package app

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/internal/controlplane"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/kubeadmcerts"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/pki"
)

// certsOptions are the flags every certs subcommand shares: the node's
// configuration (either kind: a joined node's certificates are the same)
// and its root.
type certsOptions struct {
	deps       deps
	configPath string
	root       string
}

// spec loads the node's configuration.
func (o *certsOptions) spec() (runSpec, error) { return o.deps.nodeSpec(o.configPath, o.root) }

// certsCheckOptions are the flags of `kubeboot certs check-expiration`.
type certsCheckOptions struct {
	*certsOptions
	output outputFormat
}

// certsRenewOptions are the flags of `kubeboot certs renew`.
type certsRenewOptions struct {
	*certsOptions
	output  outputFormat
	newKeys bool
	restart bool
	due     bool
}

func newCertsCommand(d deps, stdout, stderr io.Writer) *cobra.Command {
	shared := &certsOptions{deps: d}
	cmd := groupCommand("certs", "Inspect, renew and export the node's certificates")
	cmd.Example = examples(
		"kubeboot certs check-expiration --config cluster.yaml",
		"kubeboot certs renew all --config cluster.yaml --restart",
	)
	addConfigFlag(cmd.PersistentFlags(), &shared.configPath)
	addRootFlag(cmd.PersistentFlags(), &shared.root)

	checkOpts := &certsCheckOptions{certsOptions: shared}
	check := &cobra.Command{
		Use:   "check-expiration",
		Short: "List every certificate, including those of the kubeconfigs (embedded, or the kubelet's that kubelet.conf names), with its residual time",
		Example: examples(
			"kubeboot certs check-expiration --config cluster.yaml",
			"kubeboot certs check-expiration --config join.yaml -o json",
		),
		Args: usageArgs(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			r, err := checkOpts.spec()
			if err != nil {
				return err
			}
			s, err := checkOpts.deps.node(r, output.NewReporter(stderr, false), stdout)
			if err != nil {
				return err
			}
			have, err := phases.ReadPKI(s)
			if err != nil {
				return err
			}
			list := pki.Expirations(s.Config, have, time.Now())
			return printExpirations(stdout, list, phases.RenewsAt(s.Config, list), checkOpts.output.json())
		},
	}
	addOutputFlag(check.Flags(), &checkOpts.output)

	renewOpts := &certsRenewOptions{certsOptions: shared}
	renew := &cobra.Command{
		Use:   "renew all|NAME...|--due",
		Short: "Re-issue certificates and kubeconfigs with the existing CAs, and say which components must restart",
		Example: examples(
			"kubeboot certs renew all --config cluster.yaml",
			"kubeboot certs renew apiserver etcd/server --config cluster.yaml --restart",
			"kubeboot certs renew admin.conf --config cluster.yaml --new-keys",
			"kubeboot certs renew --due --restart --config cluster.yaml",
		),
		Args: func(cmd *cobra.Command, args []string) error {
			if renewOpts.due {
				return argsTaking(cobra.NoArgs, "no names with --due: it renews what is within certificates.renewBefore of its end")(cmd, args)
			}
			return usageArgs(cobra.MinimumNArgs(1))(cmd, args)
		},
		RunE: func(cmd *cobra.Command, names []string) error {
			if renewOpts.due {
				if renewOpts.newKeys {
					return &exit.UsageError{Msg: "--due and --new-keys: new keys are for the certificates you name (or all)"}
				}
				return d.execute(cmd.Context(), renewOpts.output, stdout, stderr, renewOpts.spec, onNode(controlplane.RenewDue(renewOpts.restart).Execute))
			}
			if len(names) == 1 && names[0] == "all" {
				names = nil
			}
			load := func() (runSpec, error) {
				r, err := renewOpts.spec()
				if err == nil {
					// A usage error comes before the node lock.
					err = controlplane.CheckRenewNames(r.config, names)
				}
				return r, err
			}
			renew := controlplane.Renew(names, renewOpts.newKeys, renewOpts.restart)
			return d.execute(cmd.Context(), renewOpts.output, stdout, stderr, load, onNode(renew.Execute))
		},
	}
	renew.Flags().BoolVar(&renewOpts.newKeys, "new-keys", false, "generate new private keys too")
	renew.Flags().BoolVar(&renewOpts.due, "due", false, "renew only what is within certificates.renewBefore of its end (what certificates.scheduledRenewal runs); nothing due changes nothing")
	renew.Flags().BoolVar(&renewOpts.restart, "restart", false, "then restart the affected static pods one at a time (etcd, kube-apiserver, kube-controller-manager, kube-scheduler), each waited for until a new instance is healthy and serves its certificate file")
	addOutputFlag(renew.Flags(), &renewOpts.output)
	cmd.AddCommand(check, renew, newCertsExportCommand(shared, stdout, stderr), newCertificateKeyCommand(stdout), newRotateCACommand(shared, stdout, stderr))
	return cmd
}

// expirationRow is one line of check-expiration, as printed with -o json.
type expirationRow struct {
	Name     string    `json:"name"`
	NotAfter time.Time `json:"notAfter,omitzero"`
	Residual string    `json:"residual"`
	CA       string    `json:"ca"`
	External bool      `json:"externallyManaged"`
	// File is the certificate the kubelet rotates, which kubelet.conf
	// names once finalized.
	File    string `json:"file,omitempty"`
	Missing bool   `json:"missing,omitempty"`
	Error   string `json:"error,omitempty"`
	// RenewsAt is when kubeboot renews it (phases.RenewsAt): at the first
	// run after it of bootstrap, init --renew, certs renew --due or the
	// scheduled renewal; zero for what kubeboot does not renew.
	RenewsAt time.Time `json:"renewsAt,omitzero"`
}

// printExpirations prints list, each with when it renews (renewsAt).
func printExpirations(w io.Writer, list []pki.Expiration, renewsAt map[string]time.Time, asJSON bool) error {
	rows := make([]expirationRow, len(list))
	for i, e := range list {
		rows[i] = expirationRow{Name: e.Name, NotAfter: e.NotAfter, Residual: residual(e), CA: e.CA, External: e.External, File: e.File, Missing: e.Missing,
			RenewsAt: renewsAt[e.Name]}
		if e.Err != nil {
			rows[i].Error = e.Err.Error()
		}
	}
	if asJSON {
		return json.NewEncoder(w).Encode(rows)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "CERTIFICATE\tEXPIRES\tRESIDUAL TIME\tRENEWS\tCA\tEXTERNALLY MANAGED")
	for _, r := range rows {
		expires := r.NotAfter.UTC().Format("Jan 02, 2006 15:04 UTC")
		if r.NotAfter.IsZero() {
			expires = "-"
		}
		name := r.Name
		if r.File != "" {
			name += " (" + r.File + ", rotated by the kubelet)"
		}
		renews := "-"
		if !r.RenewsAt.IsZero() {
			renews = r.RenewsAt.UTC().Format("Jan 02, 2006 15:04 UTC")
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%t\n", name, expires, r.Residual, renews, orDash(r.CA), r.External)
	}
	return tw.Flush()
}

func residual(e pki.Expiration) string {
	switch {
	case e.Err != nil:
		return "unreadable: " + e.Err.Error()
	case e.Missing:
		return "missing"
	case e.Residual < 0:
		return "expired"
	case e.Residual >= 365*24*time.Hour:
		return fmt.Sprintf("%dy", int(e.Residual.Hours()/24/365))
	}
	return fmt.Sprintf("%dd", int(e.Residual.Hours()/24))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// newCertificateKeyCommand is `kubeboot certs certificate-key`.
func newCertificateKeyCommand(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:     "certificate-key",
		Short:   "Print a new random certificate key (64 hex digits), for certificateKey and join.certificateKey, as kubeadm's",
		Example: examples("kubeboot certs certificate-key"),
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			key, err := kubeadmcerts.Generate(rand.Reader)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(stdout, key)
			return err
		},
	}
}
