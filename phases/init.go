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
	Etcd,
	ControlPlane,
	Validate,
	WriteManifests,
	Wait,
	BootstrapAdmin,
}}

func notYet(context.Context, *State) error { return errors.New("not implemented yet") }
