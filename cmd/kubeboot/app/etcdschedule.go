package app

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/etcd"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/s3store"
	"github.com/kubeboot/kubeboot/internal/snapshot"
)

// scheduleOptions are the flags of `kubeboot etcd snapshot schedule`,
// which the kubeboot-etcd-snapshots static pod runs: everything comes from
// its flags, which the pod's manifest renders from the configuration.
type scheduleOptions struct {
	endpoint    string
	tls         etcd.TLSFiles
	dir         string
	interval    time.Duration
	keep        int
	nodeName    string
	bindAddress string
	healthPort  int
	s3          config.S3Storage
}

// newSnapshotScheduleCommand is `kubeboot etcd snapshot schedule`.
func newSnapshotScheduleCommand(stderr io.Writer) *cobra.Command {
	opts := &scheduleOptions{}
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Save a verified snapshot of the local etcd member every --interval, keep the newest --keep, and copy each to S3 (the kubeboot-etcd-snapshots static pod runs this)",
		Example: examples(
			"kubeboot etcd snapshot schedule --endpoint https://10.0.0.10:2379 --cacert /etc/kubernetes/pki/etcd/ca.crt --cert /etc/kubernetes/pki/etcd/healthcheck-client.crt --key /etc/kubernetes/pki/etcd/healthcheck-client.key --interval 1h --keep 24",
			"kubeboot etcd snapshot schedule --endpoint https://10.0.0.10:2379 --cacert /etc/kubernetes/pki/etcd/ca.crt --cert /etc/kubernetes/pki/etcd/healthcheck-client.crt --key /etc/kubernetes/pki/etcd/healthcheck-client.key --node-name cp1 --s3-endpoint https://s3.example.com:9000 --s3-bucket kubeboot-snapshots --s3-prefix clusters/prod/ --s3-credentials-file /etc/kubeboot/s3-credentials",
		),
		Long: "Takes a snapshot at once, then every --interval, into --dir (as `etcd snapshot save`), keeps the newest --keep that\n" +
			"verify (as `etcd snapshot prune`), and with --s3-endpoint copies each to s3://<bucket>/<prefix><node name>/<file>,\n" +
			"where the newest --keep are kept too. Needs etcd only. A failing round is logged, recorded in --dir's\n" +
			snapshot.StatusFile + " (which `etcd snapshot list` shows) and makes /readyz fail; the schedule goes on.\n" +
			"Serves /healthz and /readyz in plain HTTP on --bind-address:--health-port. Runs until SIGINT or SIGTERM.",
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.check(); err != nil {
				return err
			}
			report := output.NewReporter(stderr, false)
			report.SetPhase("etcd-snapshot-schedule")
			return opts.run(cmd.Context(), report)
		},
	}
	flags := cmd.Flags()
	flags.StringVar(&opts.endpoint, "endpoint", "", "the local member's client URL (required)")
	flags.StringVar(&opts.tls.CA, "cacert", "", "the etcd CA (required)")
	flags.StringVar(&opts.tls.Cert, "cert", "", "a client certificate the etcd CA signed (required)")
	flags.StringVar(&opts.tls.Key, "key", "", "its key (required)")
	flags.StringVar(&opts.dir, "dir", config.DefaultEtcdSnapshotsDir, "the snapshot dir")
	flags.DurationVar(&opts.interval, "interval", config.DefaultSnapshotInterval, "the time between two snapshots, at least 1m")
	flags.IntVar(&opts.keep, "keep", config.DefaultSnapshotKeep, "how many of the newest snapshots to keep, here and in S3")
	flags.StringVar(&opts.nodeName, "node-name", "", "this node's name, which names its folder in S3 (required with --s3-endpoint)")
	flags.StringVar(&opts.bindAddress, "bind-address", "127.0.0.1", "the address of /healthz and /readyz")
	flags.IntVar(&opts.healthPort, "health-port", config.PortEtcdSnapshots, "the port of /healthz and /readyz (plain HTTP)")
	flags.StringVar(&opts.s3.Endpoint, "s3-endpoint", "", "the S3 store's https URL; empty for no copies off the node")
	flags.StringVar(&opts.s3.Bucket, "s3-bucket", "", "the bucket")
	flags.StringVar(&opts.s3.Prefix, "s3-prefix", "", "the key prefix")
	flags.StringVar(&opts.s3.Region, "s3-region", "", "the bucket's region")
	flags.StringVar(&opts.s3.CredentialsFile, "s3-credentials-file", "", "the access key, in the AWS shared credentials format")
	flags.StringVar(&opts.s3.CAFile, "s3-ca-file", "", "the CA bundle of the S3 endpoint; empty for the system's")
	return cmd
}

// check refuses flags the schedule cannot run with.
func (o *scheduleOptions) check() error {
	for _, f := range []struct{ name, value string }{{"--endpoint", o.endpoint}, {"--cacert", o.tls.CA}, {"--cert", o.tls.Cert}, {"--key", o.tls.Key}, {"--dir", o.dir}} {
		if f.value == "" {
			return &exit.UsageError{Msg: f.name + " is required"}
		}
	}
	if err := checkEndpoint(o.endpoint); err != nil {
		return err
	}
	if err := config.CheckOwnedDir("--dir", o.dir, config.SnapshotsDirUse, config.DefaultEtcdSnapshotsDir); err != nil {
		return err
	}
	switch {
	case o.interval < config.MinSnapshotInterval:
		return &exit.UsageError{Msg: fmt.Sprintf("--interval %s: at least %s", o.interval, config.MinSnapshotInterval)}
	case o.keep < 1:
		return &exit.UsageError{Msg: fmt.Sprintf("--keep %d: keep at least 1 snapshot", o.keep)}
	case o.healthPort < 1 || o.healthPort > 65535:
		return &exit.UsageError{Msg: fmt.Sprintf("--health-port %d: not a port", o.healthPort)}
	case o.s3.Endpoint != "" && o.nodeName == "":
		return &exit.UsageError{Msg: "--s3-endpoint needs --node-name, which names this node's folder in the bucket"}
	}
	return nil
}

// run serves the health endpoints and runs the schedule until ctx is done.
func (o *scheduleOptions) run(ctx context.Context, report *output.Reporter) error {
	s := &snapshot.Schedule{
		Endpoint: o.endpoint, TLS: o.tls, Dir: o.dir, Interval: o.interval, Keep: o.keep,
		Log: report.Infof,
	}
	if o.s3.Endpoint != "" {
		bucket, err := s3store.Open(o.s3, func(p string) string { return p })
		if err != nil {
			return err
		}
		s.Bucket, s.KeyPrefix = bucket, snapshot.NodeKeyPrefix(o.s3.Prefix, o.nodeName)
	}
	addr, stop, err := serveHealth(ctx, o.bindAddress, o.healthPort, s.Handler(), report)
	if err != nil {
		return err
	}
	defer stop()
	report.Infof("a snapshot of %s every %s into %s, keeping %d; health on http://%s/healthz and /readyz", o.endpoint, o.interval, o.dir, o.keep, addr)
	return s.Run(ctx)
}
