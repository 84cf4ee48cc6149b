// Package bootstrapunit holds kubeboot-bootstrap.service, the systemd unit
// that brings an unattended node (PXE, cloud-init) up at boot by running
// `kubeboot bootstrap` on the node's one file, and where that file is.
package bootstrapunit

// ConfigPath is where an unattended node's configuration is placed
// before its first boot, and what Unit reads.
const ConfigPath = "/etc/kubeboot/node.yaml"

// Unit is kubeboot-bootstrap.service, the systemd unit that brings
// an unattended node up at boot from ConfigPath: a PXE or
// cloud-init image installs kubeboot as /usr/bin/kubeboot, writes this unit
// (`kubeboot bootstrap unit`), enables it, and places the node's file.
const Unit = `# Written by kubeboot bootstrap unit: brings this node up, unattended, from
# ` + ConfigPath + ` (a ClusterConfiguration inits the cluster, a
# WorkerConfiguration joins it), retrying until it converges; on a node that
# has converged, a run changes nothing.
[Unit]
Description=kubeboot: bring this node up from ` + ConfigPath + `
Wants=network-online.target
After=network-online.target containerd.service
ConditionPathExists=` + ConfigPath + `

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/bin/kubeboot bootstrap --config ` + ConfigPath + ` -o json
TimeoutStartSec=infinity

[Install]
WantedBy=multi-user.target
`
