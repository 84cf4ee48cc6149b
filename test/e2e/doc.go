// Package e2e holds the end-to-end tests that run kubeboot against real etcd
// and Kubernetes binaries. They carry the build tag e2e and run with `make e2e`.
package e2e
