// Package join owns the two ways a node joins a cluster made by `kubeboot
// init`. ControlPlaneWorkflow is `kubeboot join --control-plane`, run on a
// ControlPlaneNode: init's phases plus its own (the endpoint check, the
// import of the cluster secrets, the etcd member's join as a learner), and
// the certificate bundle's contents, which `kubeboot certs export` writes.
// WorkerWorkflow is `kubeboot join` of a worker node, run on a WorkerNode,
// which holds no ClusterConfiguration: discovery of the cluster with a
// bootstrap token or a discovery file, the kubelet's configuration and TLS
// bootstrap credential, its start, and the wait until its Node is Ready.
package join
