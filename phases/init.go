package phases

import (
	"context"
	"errors"
)

// Init is the `kubeboot init` workflow, in dependency order.
var Init = Runner{Phases: []Phase{
	Preflight,
	{Name: "certs", Short: "Generate the certificate authorities, certificates and keys", Run: notYet},
	{Name: "kubeconfig", Short: "Generate the kubeconfig files", Run: notYet},
	{Name: "etcd", Short: "Render the etcd static pod manifest", Run: notYet},
	{Name: "control-plane", Short: "Render the API server, controller-manager and scheduler manifests", Run: notYet},
	{Name: "validate", Short: "Check that the kubelet will accept every manifest", Run: notYet},
	{Name: "write-manifests", Short: "Write the manifests atomically into the kubelet's manifest directory", Run: notYet},
	{Name: "wait", Short: "Wait until every component is healthy", LiveOnly: true, Run: notYet},
	BootstrapAdmin,
}}

func notYet(context.Context, *State) error { return errors.New("not implemented yet") }
