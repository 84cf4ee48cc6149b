// Package join owns the two ways a node joins a cluster made by `kubeboot
// init`. join.ControlPlane is `kubeboot join --control-plane`: init's
// phases plus its own (the endpoint check, the import of the cluster
// secrets, the etcd member's join as a learner), and the certificate
// bundle's contents, which `kubeboot certs export` writes. join.Worker is
// `kubeboot join` of a worker node: discovery of the cluster with a
// bootstrap token or a discovery file, the kubelet's configuration and TLS
// bootstrap credential, its start, and the wait until its Node is Ready.
package join
