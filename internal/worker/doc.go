// Package worker owns a worker node's workflows: `kubeboot join`
// (JoinWorkflow, run on a Node, which holds no ClusterConfiguration:
// discovery of the cluster with a bootstrap token or a discovery file,
// the kubelet's configuration and TLS bootstrap credential, its start,
// and the wait until its Node is Ready), and the operations on a joined
// worker: upgrade of its kubelet and reset.
package worker
