package rotateca_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/rotateca"
	"github.com/kubeboot/kubeboot/pki"
	"github.com/kubeboot/kubeboot/templates"
)

// cluster is a fake cluster whose kubelets end the rotation's pods
// (Succeeded, unless the node's step is to fail), whose controller-manager
// publishes the CAs the control-plane nodes trust into every namespace's
// kube-root-ca.crt once their trust step ran, and signs approved client
// certificate requests with the CA the control-plane nodes sign with.
type cluster struct {
	t      *testing.T
	client *fake.Clientset
	cfg    *config.ClusterConfiguration
	old    pki.KeyPair
	mu     sync.Mutex
	// steps are "step node" of each pod, in the order they were created.
	steps []string
	fail  map[string]bool
}

func readyNode(name string, cp bool, ready corev1.ConditionStatus) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}
	if cp {
		n.Labels["node-role.kubernetes.io/control-plane"] = ""
	}
	return n
}

func newCluster(t *testing.T, workerReady corev1.ConditionStatus) (*cluster, string) {
	t.Helper()
	cfg := config.New()
	config.SetDefaults(cfg, config.Host{Name: "cp1", Address: "10.0.0.11"})
	old, err := pki.NewCA(pki.CertSpecs(cfg)[0])
	if err != nil {
		t.Fatal(err)
	}
	admin := pki.KubeconfigSpecs(cfg)[0]
	adminConf, err := pki.IssueKubeconfig(admin, old, nil)
	if err != nil {
		t.Fatal(err)
	}
	// cluster-info's kubeconfig has one cluster, without a name or a context.
	info := []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n    server: https://10.0.0.11:6443\n    certificate-authority-data: " +
		base64.StdEncoding.EncodeToString(old.Cert) + "\ncontexts: null\ncurrent-context: \"\"\nusers: null\n")
	path := filepath.Join(t.TempDir(), "admin.conf")
	if err := os.WriteFile(path, adminConf, 0o600); err != nil {
		t.Fatal(err)
	}
	root := func(ns string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt", Namespace: ns}, Data: map[string]string{"ca.crt": string(old.Cert)}}
	}
	c := &cluster{t: t, cfg: cfg, old: old, fail: map[string]bool{}, client: fake.NewClientset(
		readyNode("cp1", true, corev1.ConditionTrue), readyNode("w1", false, workerReady),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}},
		root("default"), root("kube-system"),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cluster-info", Namespace: "kube-public"}, Data: map[string]string{"kubeconfig": string(info)}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "kubeadm-certs", Namespace: "kube-system"}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
			Status: appsv1.DeploymentStatus{Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1}},
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system"}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "tokenless", Namespace: "default"},
			Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{AutomountServiceAccountToken: new(bool)}}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: "default"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}},
	)}
	c.client.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		p := action.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		args := p.Spec.Containers[0].Args
		c.mu.Lock()
		c.steps = append(c.steps, args[slices.Index(args, "--step")+1]+" "+p.Spec.NodeName)
		c.mu.Unlock()
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go c.run(ctx)
	return c, path
}

// run is the cluster's kubelets and controller-manager.
func (c *cluster) run(ctx context.Context) {
	for ctx.Err() == nil {
		time.Sleep(2 * time.Millisecond)
		pods, err := c.client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: templates.RotateCAPodLabel})
		if err == nil {
			for _, p := range pods.Items {
				if p.Status.Phase != "" {
					continue
				}
				args := p.Spec.Containers[0].Args
				step := args[slices.Index(args, "--step")+1]
				c.mu.Lock()
				fail := c.fail[step+" "+p.Spec.NodeName]
				c.fail[step+" "+p.Spec.NodeName] = false
				c.mu.Unlock()
				p.Status.Phase = corev1.PodSucceeded
				if fail {
					p.Status.Phase = corev1.PodFailed
				} else if step == "trust" && p.Spec.NodeName == "cp1" {
					c.publishRootCA(ctx)
				}
				_, _ = c.client.CoreV1().Pods("kube-system").UpdateStatus(ctx, &p, metav1.UpdateOptions{})
			}
		}
		c.sign(ctx)
	}
}

// rotation is the rotation's files and keys, opened as a control-plane
// node opens them.
func (c *cluster) rotation(ctx context.Context) (pki.Rotation, bool) {
	s, err := c.client.CoreV1().Secrets("kube-system").Get(ctx, templates.RotateCAMaterial, metav1.GetOptions{})
	if err != nil {
		return pki.Rotation{}, false
	}
	rot, err := pki.OpenRotation(c.cfg, s.Data, c.old.Key)
	if err != nil {
		c.t.Error(err)
		return pki.Rotation{}, false
	}
	return rot, true
}

func (c *cluster) publishRootCA(ctx context.Context) {
	rot, ok := c.rotation(ctx)
	if !ok {
		return
	}
	for _, ns := range []string{"default", "kube-system"} {
		cm, _ := c.client.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		cm.Data["ca.crt"] = string(pki.Bundle(c.old.Cert, rot.CAs[config.CertCA].Cert))
		_, _ = c.client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
	}
}

// sign issues the certificate of each approved request, with the new CA.
func (c *cluster) sign(ctx context.Context) {
	list, err := c.client.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) == 0 {
		return
	}
	rot, ok := c.rotation(ctx)
	if !ok {
		return
	}
	for _, req := range list.Items {
		if len(req.Status.Certificate) > 0 || !slices.ContainsFunc(req.Status.Conditions, func(cond certificatesv1.CertificateSigningRequestCondition) bool {
			return cond.Type == certificatesv1.CertificateApproved
		}) {
			continue
		}
		block, _ := pem.Decode(req.Spec.Request)
		csr, err := x509.ParseCertificateRequest(block.Bytes)
		if err != nil {
			c.t.Error(err)
			return
		}
		caBlock, _ := pem.Decode(rot.CAs[config.CertCA].Cert)
		ca, _ := x509.ParseCertificate(caBlock.Bytes)
		keyBlock, _ := pem.Decode(rot.CAs[config.CertCA].Key)
		key, err := x509.ParseECPrivateKey(keyBlock.Bytes)
		if err != nil {
			c.t.Error(err)
			return
		}
		der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(7), Subject: csr.Subject,
			NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, ca, csr.PublicKey, key)
		if err != nil {
			c.t.Error(err)
			return
		}
		req.Status.Certificate = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		_, _ = c.client.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, &req, metav1.UpdateOptions{})
	}
}

func (c *cluster) created() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.steps)
}

func (c *cluster) rotate(t *testing.T, kubeconfig string) (rotateca.Result, string, error) {
	t.Helper()
	var out bytes.Buffer
	r, err := rotateca.New(rotateca.Admin{Kubeconfig: kubeconfig, Client: func(string) (kubernetes.Interface, error) { return c.client, nil }},
		rotateca.Options{Config: c.cfg, Nodes: []rotateca.Node{{Name: "cp1", ControlPlane: true}, {Name: "w1"}}, NodeConfig: "/etc/kubeboot/node.yaml",
			Image: "registry.k8s.io/pause:3.10.2", Kubeboot: templates.Kubeboot{Binary: "/usr/bin/kubeboot", Version: "v0.0.0-test"},
			NodeTimeout: 5 * time.Second, RolloutTimeout: 5 * time.Second, Poll: 5 * time.Millisecond}, output.NewReporter(&out, false))
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(context.Background())
	return res, out.String(), err
}

func (c *cluster) state(t *testing.T) rotateca.State {
	t.Helper()
	cm, err := c.client.CoreV1().ConfigMaps("kube-system").Get(context.Background(), rotateca.StateName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var s rotateca.State
	if err := json.Unmarshal([]byte(cm.Data["state"]), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func kubeconfigCA(t *testing.T, data []byte) ([]byte, []byte) {
	t.Helper()
	c, err := clientcmd.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	ctx := c.Contexts[c.CurrentContext]
	return c.Clusters[ctx.Cluster].CertificateAuthorityData, c.AuthInfos[ctx.AuthInfo].ClientCertificateData
}

// TestRotateCA: every step in order, a failed node's step stops the
// rotation with its log, and a second run takes it up there; at the end
// cluster-info and the run's kubeconfig trust the new CA alone, the
// kubeconfig holds a certificate it signed, and the new CAs' Secret is
// gone.
func TestRotateCA(t *testing.T) {
	c, kubeconfig := newCluster(t, corev1.ConditionTrue)
	c.fail["reissue cp1"] = true
	_, out, err := c.rotate(t, kubeconfig)
	if err == nil || !strings.Contains(err.Error(), "reissue: cp1: the rotation's reissue on the node failed (pod kube-system/kubeboot-rotate-ca-reissue-cp1, kept for its logs)") {
		t.Fatalf("a failed reissue: %v\n%s", err, out)
	}
	if s := c.state(t); s.Step != rotateca.StepRestartPods {
		t.Fatalf("state after a failed reissue: %+v", s)
	}
	if !strings.Contains(out, "pods no controller owns, which the rotation cannot restart: default/bare") {
		t.Errorf("the bare pod is not named:\n%s", out)
	}
	web, _ := c.client.AppsV1().Deployments("default").Get(context.Background(), "web", metav1.GetOptions{})
	proxy, _ := c.client.AppsV1().DaemonSets("kube-system").Get(context.Background(), "kube-proxy", metav1.GetOptions{})
	tokenless, _ := c.client.AppsV1().Deployments("default").Get(context.Background(), "tokenless", metav1.GetOptions{})
	id := c.state(t).ID
	if web.Spec.Template.Annotations[rotateca.RestartAnnotation] != id+"-restart-pods" || proxy.Spec.Template.Annotations[rotateca.RestartAnnotation] != id+"-restart-pods" ||
		tokenless.Spec.Template.Annotations[rotateca.RestartAnnotation] != "" {
		t.Errorf("restart annotations: web %v, kube-proxy %v, tokenless %v", web.Spec.Template.Annotations, proxy.Spec.Template.Annotations, tokenless.Spec.Template.Annotations)
	}
	if _, err := c.client.CoreV1().Secrets("kube-system").Get(context.Background(), "kubeadm-certs", metav1.GetOptions{}); err == nil {
		t.Error("kubeadm-certs, with the old CAs, is left")
	}
	mid, _ := os.ReadFile(kubeconfig)
	if ca, _ := kubeconfigCA(t, mid); !pki.Holds(ca, c.old.Cert) || len(ca) == len(c.old.Cert) {
		t.Errorf("after trust, the run's kubeconfig does not trust both CAs")
	}

	res, out, err := c.rotate(t, kubeconfig)
	if err != nil {
		t.Fatalf("the second run: %v\n%s", err, out)
	}
	if !strings.Contains(out, "resuming the CA rotation "+id) || res.ID != id {
		t.Errorf("the second run did not resume %s:\n%s", id, out)
	}
	want := []string{"trust cp1", "trust w1", "reissue cp1", "reissue cp1", "kubelet cp1", "kubelet w1", "drop cp1", "drop w1"}
	if got := c.created(); !slices.Equal(got, want) {
		t.Errorf("pods created: %v, want %v", got, want)
	}
	var steps []string
	for _, s := range res.Steps {
		steps = append(steps, s.Step)
	}
	if !slices.Equal(steps, rotateca.Steps[2:]) {
		t.Errorf("the second run's steps: %v", steps)
	}
	if _, ok := c.rotation(context.Background()); ok {
		t.Error("the new CAs' Secret is left")
	}
	if s := c.state(t); s.Step != rotateca.StepDone {
		t.Errorf("state at the end: %+v", s)
	}
	info, _ := c.client.CoreV1().ConfigMaps("kube-public").Get(context.Background(), "cluster-info", metav1.GetOptions{})
	infoCA, err := pki.KubeconfigCA([]byte(info.Data["kubeconfig"]))
	if err != nil {
		t.Fatal(err)
	}
	end, _ := os.ReadFile(kubeconfig)
	ca, cert := kubeconfigCA(t, end)
	if !bytes.Equal(ca, infoCA) || pki.Holds(ca, c.old.Cert) || !pki.SignedBy(cert, ca) {
		t.Errorf("at the end, cluster-info and the kubeconfig do not trust the new CA alone, or the kubeconfig's certificate is not its")
	}
	if pods, _ := c.client.CoreV1().Pods("kube-system").List(context.Background(), metav1.ListOptions{LabelSelector: templates.RotateCAPodLabel}); len(pods.Items) != 0 {
		t.Errorf("%d of the rotation's pods are left", len(pods.Items))
	}
}

// TestRotateCARefusesANodeNotReady: nothing is made while a node is not
// Ready, and the error names it.
func TestRotateCARefusesANodeNotReady(t *testing.T) {
	c, kubeconfig := newCluster(t, corev1.ConditionUnknown)
	before, _ := os.ReadFile(kubeconfig)
	_, _, err := c.rotate(t, kubeconfig)
	if err == nil || !strings.Contains(err.Error(), "node w1 is not Ready: every node takes part in a CA rotation") {
		t.Fatalf("a rotation with w1 down: %v", err)
	}
	if _, ok := c.rotation(context.Background()); ok {
		t.Error("a refused rotation made its Secret")
	}
	if _, err := c.client.CoreV1().ConfigMaps("kube-system").Get(context.Background(), rotateca.StateName, metav1.GetOptions{}); err == nil {
		t.Error("a refused rotation recorded a state")
	}
	if after, _ := os.ReadFile(kubeconfig); !bytes.Equal(after, before) {
		t.Error("a refused rotation changed the kubeconfig")
	}
}
