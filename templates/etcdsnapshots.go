package templates

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubeboot/kubeboot/internal/config"
)

// EtcdSnapshotsCommand is the kubeboot command the snapshot pod runs.
var EtcdSnapshotsCommand = []string{"etcd", "snapshot", "schedule"}

// EtcdSnapshots builds the kubeboot-etcd-snapshots static pod: `kubeboot
// etcd snapshot schedule`, the node's binary kb in
// etcd.local.scheduledSnapshots.image, saving
// a verified snapshot of this node's member every interval into the
// snapshot dir, keeping the newest, and copying each to S3 when s3 is set.
// It needs only etcd: the member's client URL, the etcd CA and the
// healthcheck client certificate (any client the etcd CA signed may read
// every key), mounted one file at a time. Like the CSR approver it serves
// /healthz (alive) and /readyz (the last snapshot succeeded) in plain HTTP
// on the loopback address, so a failing schedule shows as a pod that is
// not Ready.
func EtcdSnapshots(cfg *config.ClusterConfiguration, kb Kubeboot) (*corev1.Pod, error) {
	advertise, err := advertiseAddress(cfg)
	if err != nil {
		return nil, fmt.Errorf("build %s pod: %w", config.NameEtcdSnapshots, err)
	}
	s := cfg.Etcd.Local.ScheduledSnapshots
	bind := loopbackAddress(advertise)
	caFile := cfg.CertPath(config.CertEtcdCA)
	certFile := cfg.CertPath(config.CertEtcdHealthcheckClient)
	keyFile := cfg.KeyPath(config.CertEtcdHealthcheckClient)
	flags := []flag{
		{"bind-address", bind},
		{"cacert", caFile},
		{"cert", certFile},
		{"dir", cfg.Etcd.Local.SnapshotsDir},
		{"endpoint", etcdURL("https", cfg.Node.AdvertiseAddress, config.PortEtcdClient)},
		{"health-port", strconv.Itoa(config.PortEtcdSnapshots)},
		{"interval", s.Interval.Duration.String()},
		{"keep", strconv.Itoa(s.Keep)},
		{"key", keyFile},
		{"node-name", cfg.Node.Name},
	}
	mounts := []hostMount{
		{name: "etcd-ca", path: caFile, readOnly: true, pathType: corev1.HostPathFile},
		{name: "etcd-client-cert", path: certFile, readOnly: true, pathType: corev1.HostPathFile},
		{name: "etcd-client-key", path: keyFile, readOnly: true, pathType: corev1.HostPathFile},
		{name: "etcd-snapshots", path: cfg.Etcd.Local.SnapshotsDir, pathType: corev1.HostPathDirectoryOrCreate},
	}
	if b := s.S3; b != nil {
		flags = append(flags,
			flag{"s3-bucket", b.Bucket},
			flag{"s3-credentials-file", b.CredentialsFile},
			flag{"s3-endpoint", b.Endpoint},
		)
		mounts = append(mounts, hostMount{name: "s3-credentials", path: b.CredentialsFile, readOnly: true, pathType: corev1.HostPathFile})
		if b.CAFile != "" {
			flags = append(flags, flag{"s3-ca-file", b.CAFile})
			mounts = append(mounts, hostMount{name: "s3-ca", path: b.CAFile, readOnly: true, pathType: corev1.HostPathFile})
		} else {
			// The store is trusted through the node's CAs, which the
			// image does not hold.
			mounts = append(mounts, caBundleMounts()...)
		}
		if b.Prefix != "" {
			flags = append(flags, flag{"s3-prefix", b.Prefix})
		}
		if b.Region != "" {
			flags = append(flags, flag{"s3-region", b.Region})
		}
	}
	return newPod(kubebootSpec(spec{
		name:       config.NameEtcdSnapshots,
		image:      s.Image,
		subcommand: EtcdSnapshotsCommand,
		flags:      mergeFlags(flags, nil),
		health:     endpoint{scheme: corev1.URISchemeHTTP, host: bind, port: config.PortEtcdSnapshots},
		livez:      "/healthz",
		readyz:     "/readyz",
		startup:    "/healthz",
		cpu:        "10m",
		mounts:     mounts,
		timeout:    cfg.Timeouts.ControlPlane.Duration,
	}, kb)), nil
}
