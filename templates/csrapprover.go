package templates

import (
	"fmt"
	"strconv"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeboot/kubeboot/internal/config"
)

// CSRApproverCommand is the kubeboot subcommand the approver's pod runs.
const CSRApproverCommand = "csr-approver"

// CSRApproverRole names the ClusterRole and ClusterRoleBinding that let
// the approver do its work and nothing else.
const CSRApproverRole = "kubeboot:csr-approver"

// CSRApprover builds the kubeboot-csr-approver static pod: `kubeboot
// csr-approver`, the node's binary kb in csrApprover.image, talking to
// this node's API server with csr-approver.conf, the only file it mounts
// beside the binary. A static pod may not use
// a service account, hence the kubeconfig. It serves /healthz and /readyz
// in plain HTTP on the loopback address, which is all its probes need: it
// serves nothing else and holds no serving certificate.
func CSRApprover(cfg *config.ClusterConfiguration, kb Kubeboot) (*corev1.Pod, error) {
	advertise, err := advertiseAddress(cfg)
	if err != nil {
		return nil, fmt.Errorf("build %s pod: %w", config.NameCSRApprover, err)
	}
	kubeconfig := cfg.KubeconfigPath(config.KubeconfigCSRApprover)
	bind := loopbackAddress(advertise)
	flags := mergeFlags([]flag{
		{"bind-address", bind},
		{"health-port", strconv.Itoa(config.PortCSRApprover)},
		{"kubeconfig", kubeconfig},
	}, nil)
	return newPod(kubebootSpec(spec{
		name:       config.NameCSRApprover,
		image:      cfg.CSRApprover.Image,
		subcommand: []string{CSRApproverCommand},
		flags:      flags,
		health:     endpoint{scheme: corev1.URISchemeHTTP, host: bind, port: config.PortCSRApprover},
		livez:      "/healthz",
		readyz:     "/readyz",
		startup:    "/healthz",
		cpu:        "10m",
		mounts:     []hostMount{kubeconfigMount(cfg, config.KubeconfigCSRApprover)},
		timeout:    cfg.Timeouts.ControlPlane.Duration,
	}, kb)), nil
}

// CSRApproverRBAC is what the approver, as user, may do: read and watch
// CSRs and Nodes (a serving certificate must name its Node's addresses, a
// node-bound join needs its Node not to exist yet), and update the
// approval of a CSR, which the API server allows only to whoever may
// approve for the CSR's signer: kubernetes.io/kubelet-serving and
// kubernetes.io/kube-apiserver-client-kubelet alone. It may neither create nor delete CSRs, nor change a CSR's status.
func CSRApproverRBAC(subject string) Objects {
	read := []string{"get", "list", "watch"}
	return Objects{
		ClusterRoles: []*rbacv1.ClusterRole{{
			TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRole"},
			ObjectMeta: metav1.ObjectMeta{Name: CSRApproverRole},
			Rules: []rbacv1.PolicyRule{
				{Verbs: read, APIGroups: []string{certificatesv1.GroupName}, Resources: []string{"certificatesigningrequests"}},
				{Verbs: []string{"update"}, APIGroups: []string{certificatesv1.GroupName}, Resources: []string{"certificatesigningrequests/approval"}},
				{Verbs: []string{"approve"}, APIGroups: []string{certificatesv1.GroupName}, Resources: []string{"signers"},
					ResourceNames: []string{certificatesv1.KubeletServingSignerName, certificatesv1.KubeAPIServerClientKubeletSignerName}},
				{Verbs: read, APIGroups: []string{""}, Resources: []string{"nodes"}},
			},
		}},
		ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{clusterRoleBinding(CSRApproverRole, CSRApproverRole, user(subject))},
	}
}
