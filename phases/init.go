package phases

import "github.com/kubeboot/kubeboot/internal/workflow"

// InitWorkflow is the `kubeboot init` workflow, in dependency order. As with
// kubeadm, the kubelet starts once the manifests are written, before the
// wait for the control plane it runs. The phases after bootstrap-admin
// make the control plane joinable; they carry kubeadm's names, so
// --skip-phases reads as it does with kubeadm, and kubelet-finalize comes
// after them, as in kubeadm. upload-certs, after upload-config as in
// kubeadm, stores the cluster secrets for joining control-plane nodes when
// asked to. csr-approver, kubeboot's own, lets the CSR
// approver approve the serving certificates of joined nodes' kubelets;
// certs-renewal, kubeboot's own too, has systemd renew what comes due.
// addon comes last, as in kubeadm: CoreDNS and kube-proxy, then the
// user's own manifests (addons.manifests).
var InitWorkflow = workflow.Runner[*Node]{Phases: []workflow.Phase[*Node]{
	Preflight,
	Certs,
	Kubeconfig,
	KubeletConfig,
	APIServerConfig,
	Etcd,
	ControlPlane,
	Validate,
	WriteManifests,
	KubeletStart(ControlPlaneKubelet),
	Wait,
	BootstrapAdmin,
	UploadConfig,
	UploadCerts,
	MarkControlPlane,
	BootstrapToken,
	ClusterInfo,
	KubeletFinalize,
	CSRApprover,
	CertsRenewal,
	Addon,
}}
