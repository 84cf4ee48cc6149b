package phases

// Init is the `kubeboot init` workflow, in dependency order. The phases
// after bootstrap-admin make the control plane joinable; they carry
// kubeadm's names, so --skip-phases reads as it does with kubeadm. The
// last, kubeboot's own, lets the CSR approver approve the serving
// certificates of joined nodes' kubelets.
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
	UploadConfig,
	MarkControlPlane,
	BootstrapToken,
	ClusterInfo,
	CSRApprover,
}}
