// Package bootstrap owns bringing a node up unattended (PXE, cloud-init):
// kubeboot-bootstrap.service, the systemd unit that runs `kubeboot
// bootstrap` at boot on the node's one file, where that file is, and the
// rule of its attempts: each runs the node's workflow, and a failed one
// is retried after an interval unless no retry can fix it.
package bootstrap

import (
	"context"
	"time"

	"github.com/kubeboot/kubeboot/internal/exit"
)

// ConfigPath is where an unattended node's configuration is placed
// before its first boot, and what Unit reads.
const ConfigPath = "/etc/kubeboot/node.yaml"

// Unit is kubeboot-bootstrap.service, the systemd unit that brings
// an unattended node up at boot from ConfigPath: a PXE or
// cloud-init image installs the kubeboot package, which holds it (or
// writes it with `kubeboot bootstrap unit`), places the node's file (or
// boots with the kernel command line that says where to fetch it) and
// enables it.
const Unit = `# kubeboot-bootstrap.service, from the kubeboot package (kubeboot bootstrap
# unit prints it too): brings this node up, unattended, from
# ` + ConfigPath + ` (a ClusterConfiguration inits the cluster, a
# WorkerConfiguration joins it), retrying until it converges; on a node that
# has converged, a run changes nothing. A machine whose disk holds no such
# file fetches it first from the URL of the kernel command line's
# kubeboot.config=, pinned by kubeboot.config-ca-hash= (kubeboot config serve).
[Unit]
Description=kubeboot: bring this node up from ` + ConfigPath + `
Wants=network-online.target
After=network-online.target containerd.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/bin/kubeboot bootstrap --config ` + ConfigPath + ` -o json
TimeoutStartSec=infinity

[Install]
WantedBy=multi-user.target
`

// Retryable says whether another attempt may succeed: not after a mistake
// in the configuration or a manifest the kubelet would reject, which only
// a new configuration fixes.
func Retryable(err error) bool {
	code := exit.Code(err)
	return code != exit.Usage && code != exit.Rejected
}

// Retry runs attempt until it succeeds, it fails in a way no retry fixes,
// or ctx ends (systemd stopping the unit), waiting interval between
// attempts; failed says each failure that is retried. It returns the last
// attempt's error.
func Retry(ctx context.Context, interval time.Duration, attempt func(context.Context) error, failed func(n int, err error)) error {
	for n := 1; ; n++ {
		err := attempt(ctx)
		if err == nil || !Retryable(err) || ctx.Err() != nil {
			return err
		}
		failed(n, err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(interval):
		}
	}
}
