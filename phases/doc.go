// Package phases owns init's workflow (InitWorkflow) and the phases and
// helpers the other workflows share, built on package workflow's engine:
// Node, the data of the workflows that run a control-plane node's phases,
// with the facts NewNode reads from the node; init's phases, each of
// which converges; kubelet-start for either kind of node; preflight's
// host checks; rendering, staging and reading manifests; the API client
// and server-side apply; discovery of a cluster to join. Phases reach
// disk only through a files.Writer and the terminal only through an
// output.Reporter.
package phases
