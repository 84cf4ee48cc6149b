package worker

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/discovery"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/testsupport"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
	"github.com/kubeboot/kubeboot/pki"
	"github.com/kubeboot/kubeboot/templates"
)

// The helpers of the worker join's tests: a worker on a throw-away root
// whose cluster is discovered already and whose API server is a fake
// clientset.

var workerToken = bootstraptoken.Token{ID: "abcdef", Secret: "0123456789abcdef"}

// workerNode is a joining worker1 and its cluster.
type workerNode struct {
	s      *Node
	w      *config.WorkerConfiguration
	client *fake.Clientset
	out    *bytes.Buffer
	ca     pki.KeyPair
}

// newWorker is worker1 joining a cluster with a CA of its own, reached at
// 10.0.0.10:6443, whose API server holds objs; out collects the progress
// as JSON events. The kubelet's port is a free one.
func newWorker(t *testing.T, objs ...runtime.Object) *workerNode {
	t.Helper()
	ca := newTestCA(t)
	return newWorkerOf(t, ca, t.TempDir(), objs...)
}

// newWorkerOf is newWorker with the cluster CA ca, on root.
func newWorkerOf(t *testing.T, ca pki.KeyPair, root string, objs ...runtime.Object) *workerNode {
	t.Helper()
	hash, err := pki.CACertHash(ca.Cert)
	if err != nil {
		t.Fatal(err)
	}
	w := &config.WorkerConfiguration{Discovery: config.Discovery{APIServerEndpoint: "10.0.0.10:6443", Token: workerToken.Value(), CACertHashes: []string{hash}}}
	config.SetWorkerDefaults(w, config.Host{Name: "worker1"})
	w.Kubelet.ExtraConfig = map[string]any{"address": "127.0.0.1", "port": float64(testsupport.FreePort(t))}
	w.Timeouts.TLSBootstrap.Duration = 5 * time.Second
	client := fake.NewClientset(objs...)
	var out bytes.Buffer
	s := NewNode(phasestest.NewRun(root, output.NewReporter(&out, true)), w)
	s.API = client
	s.Discovered = &discovery.Cluster{Name: "kubernetes", Server: "https://10.0.0.10:6443", CA: ca.Cert, CAHash: hash, Token: workerToken}
	// This host's own checks (forwarding, swap, cgroups, the kubelet and
	// the runtime) are phases' hostchecks_test.go's; these tests are the
	// worker's.
	s.Options.IgnorePreflightErrors = []string{"filecontent--proc-sys-net-ipv4-ip_forward", "swap", "cgroupv1", "kernelversion", "fileexisting-kubelet", "cri"}
	if os.Geteuid() != 0 {
		s.Options.IgnorePreflightErrors = append(s.Options.IgnorePreflightErrors, "isprivilegeduser")
	}
	return &workerNode{s: s, w: w, client: client, out: &out, ca: ca}
}

func newTestCA(t *testing.T) pki.KeyPair {
	t.Helper()
	ca, err := pki.NewCA(pki.CertSpec{Name: "ca", CN: "kubernetes", Usage: pki.UsageCA, Algorithm: config.ECDSAP256, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// host is the path on this machine of a node path of n.
func (n *workerNode) host(path string) string { return n.s.Files.HostPath(path) }

// writeKubeletConf writes kubelet.conf as the kubelet does after its TLS
// bootstrap: the CA embedded, and its client certificate of user
// system:node:<node>, from ca, in a file of its own.
func (n *workerNode) writeKubeletConf(t *testing.T, ca pki.KeyPair, node string) {
	t.Helper()
	client, err := pki.Issue(pki.CertSpec{Name: "kubelet-client", CN: "system:node:" + node, Org: []string{"system:nodes"}, Usage: pki.UsageClient, CA: "ca",
		Algorithm: config.ECDSAP256, Validity: time.Hour}, ca, nil)
	if err != nil {
		t.Fatal(err)
	}
	const pair = "/var/lib/kubelet/pki/kubelet-client-current.pem"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["default-cluster"] = &clientcmdapi.Cluster{Server: "https://10.0.0.10:6443", CertificateAuthorityData: ca.Cert}
	cfg.AuthInfos["default-auth"] = &clientcmdapi.AuthInfo{ClientCertificate: pair, ClientKey: pair}
	cfg.Contexts["default-context"] = &clientcmdapi.Context{Cluster: "default-cluster", AuthInfo: "default-auth"}
	cfg.CurrentContext = "default-context"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, n.host(pair), append(client.Cert, client.Key...), 0o600)
	mustWrite(t, n.host(n.w.KubeconfigPath(config.KubeconfigKubelet)), data, 0o600)
}

func mustWrite(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
}

// kubeletConfigMap is kube-system/kubelet-config as init's upload-config
// phase stores it, for a control plane whose kubelet.extraConfig holds a
// cluster-wide setting and node-only ones.
func kubeletConfigMap(t *testing.T) *corev1.ConfigMap {
	t.Helper()
	c := config.New()
	config.SetDefaults(c, config.Host{Name: "node1", Address: "10.0.0.10"})
	c.Kubelet.ExtraConfig = map[string]any{"failSwapOn": false, "address": "10.0.0.10", "podLogsDir": "/srv/node1/logs"}
	data, err := phases.ClusterKubeletConfiguration(c)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: templates.KubeletConfigName, Namespace: metav1.NamespaceSystem},
		Data: map[string]string{templates.KubeletConfigKey: string(data)}}
}

// nodeObject is worker1's Node as its kubelet reports it, Ready or not.
func nodeObject(isReady bool) *corev1.Node {
	status := corev1.ConditionFalse
	reason, msg := "KubeletNotReady", "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"
	if isReady {
		status, reason, msg = corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker1"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: reason, Message: msg}}}}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func runPhases(t *testing.T, n *workerNode, list ...workflow.Phase[*Node]) error {
	t.Helper()
	return phasestest.Run(n.s, list...)
}
