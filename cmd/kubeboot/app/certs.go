package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/pki"
)

func newCertsCommand(stdout, stderr io.Writer) *cobra.Command {
	// A joined node has a JoinConfiguration; its certificates are the same kind.
	opts := &initOptions{output: "text", anyKind: true}
	cmd := groupCommand("certs", "Inspect, renew and export the node's certificates")
	cmd.PersistentFlags().StringVar(&opts.configPath, "config", "", "ClusterConfiguration or JoinConfiguration file")
	cmd.PersistentFlags().StringVar(&opts.root, "root", "", "read and write the files under this directory")

	check := &cobra.Command{
		Use:   "check-expiration",
		Short: "List every certificate, including those embedded in kubeconfigs, with its residual time",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			s, err := newState(opts, phases.NewReporter(stderr, false), stdout)
			if err != nil {
				return err
			}
			have, err := phases.ReadPKI(s)
			if err != nil {
				return err
			}
			return printExpirations(stdout, pki.Expirations(s.Config, have, time.Now()), opts.output == "json")
		},
	}
	addOutputFlag(check, &opts.output)

	var newKeys, restartAfter bool
	renew := &cobra.Command{
		Use:   "renew all|NAME...",
		Short: "Re-issue certificates and kubeconfigs with the existing CAs, and say which components must restart",
		Args:  usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, names []string) error {
			return runWorkflow(cmd.Context(), opts, stdout, stderr, func(ctx context.Context, s *phases.State) ([]string, error) {
				s.Report.SetPhase("certs renew")
				if len(names) == 1 && names[0] == "all" {
					names = nil
				}
				known := append(pki.CertNames(s.Config), pki.KubeconfigNames(s.Config)...)
				for _, n := range names {
					if !slices.Contains(known, n) {
						return nil, &phases.UsageError{Msg: fmt.Sprintf("unknown certificate or kubeconfig %q: choose from %s", n, strings.Join(known, ", "))}
					}
				}
				restart, err := phases.RenewCerts(s, names, newKeys)
				if err != nil {
					return nil, err
				}
				if len(restart) == 0 {
					return nil, nil
				}
				if !restartAfter {
					s.Report.Infof("restart to load the new certificates: %s (or re-run with --restart)", strings.Join(restart, ", "))
					return nil, nil
				}
				return nil, phases.RestartComponents(ctx, s, restart)
			})
		},
	}
	renew.Flags().BoolVar(&newKeys, "new-keys", false, "generate new private keys too")
	renew.Flags().BoolVar(&restartAfter, "restart", false, "then restart the affected static pods one at a time (etcd, kube-apiserver, kube-controller-manager, kube-scheduler), each waited for until a new instance is healthy and serves its certificate file")
	renew.Flags().VarP(&opts.output, "output", "o", "output format: text or json")
	cmd.AddCommand(check, renew, newCertsExportCommand(opts, stdout, stderr))
	return cmd
}

// expirationRow is one line of check-expiration, as printed with -o json.
type expirationRow struct {
	Name     string    `json:"name"`
	NotAfter time.Time `json:"notAfter,omitzero"`
	Residual string    `json:"residual"`
	CA       string    `json:"ca"`
	External bool      `json:"externallyManaged"`
	Missing  bool      `json:"missing,omitempty"`
	Error    string    `json:"error,omitempty"`
}

func printExpirations(w io.Writer, list []pki.Expiration, asJSON bool) error {
	rows := make([]expirationRow, len(list))
	for i, e := range list {
		rows[i] = expirationRow{Name: e.Name, NotAfter: e.NotAfter, Residual: residual(e), CA: e.CA, External: e.External, Missing: e.Missing}
		if e.Err != nil {
			rows[i].Error = e.Err.Error()
		}
	}
	if asJSON {
		return json.NewEncoder(w).Encode(rows)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "CERTIFICATE\tEXPIRES\tRESIDUAL TIME\tCA\tEXTERNALLY MANAGED")
	for _, r := range rows {
		expires := r.NotAfter.UTC().Format("Jan 02, 2006 15:04 UTC")
		if r.NotAfter.IsZero() {
			expires = "-"
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\n", r.Name, expires, r.Residual, orDash(r.CA), r.External)
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
