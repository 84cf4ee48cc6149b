package phases

// Init is the `kubeboot init` workflow, in dependency order.
var Init = Runner{Phases: []Phase{
	Preflight,
	Certs,
	Kubeconfig,
	KubeletConfig,
	APIServerConfig,
	Etcd,
	ControlPlane,
	Validate,
	WriteManifests,
	Wait,
	BootstrapAdmin,
}}
