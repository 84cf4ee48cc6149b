// Package controlplane owns the workflows of a control-plane node after
// init, whose phases are package phases': `kubeboot join
// --control-plane` (JoinWorkflow, run on a JoinNode: init's phases plus
// its own — the endpoint check, the import of the cluster secrets, the
// etcd member's join as a learner — and the certificate bundle's
// contents, which `kubeboot certs export` writes), and the operations on
// a running control-plane node: upgrade plan and apply (with its
// preflight, etcd snapshot, journal and verified rollback), reset, the
// restore of etcd from a snapshot, certificate renewal's verified restart
// of static pods, and diff. The commands run the operations as
// workflow.Operations: one named step that reports like a phase.
package controlplane
