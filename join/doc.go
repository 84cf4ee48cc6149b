// Package join owns the `kubeboot join --control-plane` workflow: its phase
// list, built from init's phases plus its own (the endpoint check, the
// import of the cluster secrets, the etcd member's join as a learner), and
// the certificate bundle's contents, which `kubeboot certs export` writes.
package join
