//go:build e2e

package e2e

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/lab"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
)

// workerNames are TestAddWorkers' workers: w1 joins with kubeboot join,
// w2 with the real kubeadm join.
var workerNames = []string{"w1", "w2"}

// TestAddWorkers brings up a lab of one control-plane node and two
// workers, one joined with `kubeboot join` (a token and the CA's hash),
// the other with the real `kubeadm join` v1.36.3 and kubeboot's discovery
// file, and checks what a cluster with workers must do: every Node Ready,
// only the control plane marked; each worker's kubelet serving certificate
// approved by kubeboot's CSR approver, so that logs and exec reach its
// pods through the API server, which verifies it; forged serving CSRs
// denied; a join refused, with nothing written, for an expired or deleted
// token, a wrong CA hash, an unreachable endpoint and the name of a Ready
// Node; and kubeadm's own commands reading the cluster on its control
// plane.
func TestAddWorkers(t *testing.T) {
	c := startCluster(t, "e2ew", "10.89.8.0/24", "10.246.0.0/16", `
- name: cp1
  role: control-plane
- name: w1
  role: worker
- name: w2
  role: worker
  join: kubeadm
`)
	r := runCommand(t, kubebootBin, "lab", "up", "--cluster", c.desc, "--bin-dir", binDir, "-o", "json")
	if r.code != 0 {
		t.Fatalf("lab up --cluster exited %d:\n%s\n%s", r.code, r.stderr, tailString(r.stdout, 30))
	}
	t.Logf("TIMING: lab up --cluster (one control-plane node, a kubeboot worker, a kubeadm worker): %s", r.took.Round(time.Millisecond))
	for _, line := range strings.Split(r.stdout, "\n") {
		if strings.Contains(line, " up in ") {
			t.Logf("TIMING: %s", line)
		}
	}

	nodes := c.readyNodes(t, 3)

	t.Run("each node's bring-up is staged", func(t *testing.T) {
		checkStages(t, c, "cp1", slices.Concat([]string{"runtime-started", "images-ready", "bootstrap-started", "kubelet-started", "manifests-seen"},
			componentsHealthy, []string{"control-plane-healthy", "workflow-done"})...)
		checkStages(t, c, "w1", "runtime-started", "images-ready", "bootstrap-started", "kubelet-started", "workflow-done")
		checkStages(t, c, "w2", "runtime-started", "images-ready", "bootstrap-started", "kubelet-started", "kubeadm-exited", "workflow-done")
	})

	t.Run("only the control plane is marked", func(t *testing.T) {
		for name, n := range nodes {
			_, labelled := n.Labels["node-role.kubernetes.io/control-plane"]
			tainted := slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
				return t.Key == "node-role.kubernetes.io/control-plane" && t.Effect == corev1.TaintEffectNoSchedule
			})
			if want := name == "cp1"; labelled != want || tainted != want {
				t.Errorf("node %s: control-plane label %v, taint %v; want %v", name, labelled, tainted, want)
			}
		}
		for i, name := range []string{"cp1", "w1", "w2"} {
			if got, want := internalIP(nodes[name]), fmt.Sprintf("10.89.8.%d", 10+i); got != want {
				t.Errorf("node %s has InternalIP %q, want %s", name, got, want)
			}
		}
	})

	t.Run("the approver approved each worker's serving certificate", func(t *testing.T) {
		var csrs certificatesv1.CertificateSigningRequestList
		if err := c.kubectlJSON(t, &csrs, "get", "csr"); err != nil {
			t.Fatal(err)
		}
		for _, w := range workerNames {
			approved := slices.ContainsFunc(csrs.Items, func(csr certificatesv1.CertificateSigningRequest) bool {
				return csr.Spec.SignerName == certificatesv1.KubeletServingSignerName && csr.Spec.Username == "system:node:"+w &&
					hasCondition(csr, certificatesv1.CertificateApproved, "KubebootNodeServingCertificate") && len(csr.Status.Certificate) > 0
			})
			if !approved {
				t.Errorf("no kubelet-serving CSR of %s approved by kubeboot's approver and issued", w)
			}
		}
	})

	pods := c.runWebPods(t, workerNames)

	t.Run("logs and exec reach each worker's pod through the API server", func(t *testing.T) {
		for _, w := range workerNames {
			if out, err := c.kubectlErr(t, "logs", "web-"+w); err != nil || !strings.Contains(out, "8080") {
				t.Errorf("kubectl logs web-%s: %v: %q", w, err, out)
			}
			other := pods[workerNames[1-slices.Index(workerNames, w)]]
			target := net.JoinHostPort(other.Status.PodIP, "8080")
			if out, err := c.kubectlErr(t, "exec", "web-"+w, "--", "/agnhost", "connect", target, "--timeout=5s"); err != nil {
				t.Errorf("exec in web-%s, connecting to %s on the other worker: %v %s", w, target, err, out)
			}
		}
		manifest := readFile(t, filepath.Join(c.root, "c", "cp1", "manifests", "kube-apiserver.yaml"))
		if !strings.Contains(string(manifest), "--kubelet-certificate-authority="+filepath.Join(c.root, "c", "cp1", "pki", "ca.crt")) {
			t.Error("the API server does not verify kubelets against the cluster CA")
		}
	})

	t.Run("forged serving CSRs are denied", func(t *testing.T) { checkForgedCSRs(t, c) })
	t.Run("refused joins write nothing", func(t *testing.T) { checkRefusedJoins(t, c) })
	t.Run("kubeadm reads the cluster on its control plane", func(t *testing.T) { checkKubeadmCommands(t, c) })
	t.Run("reset a worker and join it again", func(t *testing.T) { checkResetWorker(t, c, "w1") })
}

// checkResetWorker: after lab down stops the worker's kubelet and
// containerd, kubeboot reset --delete-node removes what its join wrote
// (kubelet.conf, the kubelet's configuration, the cluster CA) and its Node;
// the worker joins again, is Ready, and holds a new client certificate.
func checkResetWorker(t *testing.T, c *labCluster, name string) {
	cl, err := lab.LoadCluster(c.desc)
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := cl.NodeConfigPath(name)
	doc, err := config.Load(cfgPath, config.Env{Host: config.Host{Name: name}, Kinds: []string{config.KindWorkerConfiguration}})
	if err != nil {
		t.Fatal(err)
	}
	w := doc.Worker
	clientCert := filepath.Join(w.Paths.KubeconfigDir, "lab", "kubelet", "pki", "kubelet-client-current.pem")
	before := readFile(t, clientCert)
	if r := c.inNode(t, name, kubebootBin, "lab", "down", "--config", cfgPath, "--bin-dir", binDir); r.code != 0 {
		t.Fatalf("lab down of %s exited %d:\n%s", name, r.code, r.stderr)
	}
	r := runCommand(t, kubebootBin, "reset", "--config", cfgPath, "--delete-node", "--kubeconfig", c.kubeconfig)
	if r.code != 0 || !strings.Contains(r.stderr, "left /etc/cni/net.d") || !strings.Contains(r.stderr, "deleted Node "+name) {
		t.Fatalf("reset --delete-node of %s exited %d:\n%s", name, r.code, r.stderr)
	}
	for _, gone := range []string{w.KubeconfigPath(config.KubeconfigKubelet), w.Kubelet.ConfigFile, w.CAPath()} {
		if _, err := os.Lstat(gone); !os.IsNotExist(err) {
			t.Errorf("%s is still there after reset: %v", gone, err)
		}
	}
	if _, err := c.kubectlErr(t, "get", "node", name); err == nil || !strings.Contains(err.Error(), "NotFound") {
		t.Errorf("Node %s after reset --delete-node: %v", name, err)
	}
	r = c.inNode(t, name, kubebootBin, "lab", "up", "--config", cfgPath, "--bin-dir", binDir)
	if r.code != 0 {
		t.Fatalf("lab up of %s after reset exited %d:\n%s", name, r.code, r.stderr)
	}
	t.Logf("TIMING: lab up (join) of %s after reset: %s", name, r.took.Round(time.Millisecond))
	c.readyNodes(t, 3)
	if after := readFile(t, clientCert); bytes.Equal(before, after) {
		t.Errorf("%s holds the same client certificate after reset and a new join", name)
	}
	// The DaemonSets' pods start on the new Node: the test ends, and the
	// lab comes down, once they run rather than while their sandboxes are
	// being made.
	eventually(t, "the pods on "+name+" running", func() error {
		var pods corev1.PodList
		if err := c.kubectlJSON(t, &pods, "get", "pods", "-A", "--field-selector", "spec.nodeName="+name); err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			return fmt.Errorf("no pod on %s yet", name)
		}
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("pod %s/%s is %s", p.Namespace, p.Name, p.Status.Phase)
			}
		}
		return nil
	})
}

// hasCondition says whether the CSR has the condition with the reason.
func hasCondition(csr certificatesv1.CertificateSigningRequest, kind certificatesv1.RequestConditionType, reason string) bool {
	return slices.ContainsFunc(csr.Status.Conditions, func(c certificatesv1.CertificateSigningRequestCondition) bool {
		return c.Type == kind && c.Reason == reason
	})
}

// inNode runs a binary in a lab node's network namespace.
func (c *labCluster) inNode(t *testing.T, node, bin string, args ...string) result {
	t.Helper()
	return runCommand(t, "nsenter", append([]string{"--net=/run/netns/kb-" + c.name + "-" + node, "--", bin}, args...)...)
}

// checkForgedCSRs posts kubelet-serving CSRs that must not be approved:
// with w1's own kubelet credentials, one for w1 that asks for a name that
// is not w1's (the approver denies it) and one for w2 (the API server's
// node restriction refuses it before the approver sees it); and with the
// admin's, one for w2 (the approver denies it: not a node's request).
func checkForgedCSRs(t *testing.T, c *labCluster) {
	asW1 := func(t *testing.T, manifest string) result {
		return c.inNode(t, "w1", filepath.Join(binDir, "kubectl"), "--kubeconfig", filepath.Join(c.root, "c", "w1", "kubelet.conf"), "create", "-f", manifest)
	}
	asAdmin := func(t *testing.T, manifest string) result {
		return runCommand(t, filepath.Join(binDir, "kubectl"), "--kubeconfig", c.kubeconfig, "create", "-f", manifest)
	}
	for _, forged := range []struct {
		name, node, dns string
		create          func(*testing.T, string) result
		// reason is the approver's denial; empty when the API server
		// refuses the request, with forbidden in its error.
		reason, forbidden string
	}{
		{name: "forged-name", node: "w1", dns: "api.example.com", create: asW1, reason: "SANNotNodeAddress"},
		{name: "forged-identity", node: "w2", dns: "w2", create: asW1, forbidden: "can only create a node CSR with CN=system:node:w1"},
		{name: "forged-requester", node: "w2", dns: "w2", create: asAdmin, reason: "RequesterNotANode"},
	} {
		t.Run(forged.name, func(t *testing.T) {
			manifest := filepath.Join(c.root, forged.name+".yaml")
			writeServingCSR(t, manifest, forged.name, forged.node, forged.dns)
			r := forged.create(t, manifest)
			if forged.reason == "" {
				if r.code == 0 || !strings.Contains(r.stderr, forged.forbidden) {
					t.Errorf("create CSR %s: exit %d, want it refused with %q: %s", forged.name, r.code, forged.forbidden, r.stderr)
				}
				return
			}
			if r.code != 0 {
				t.Fatalf("create CSR %s: exit %d: %s", forged.name, r.code, r.stderr)
			}
			eventually(t, "CSR "+forged.name+" denied", func() error {
				var csr certificatesv1.CertificateSigningRequest
				if err := c.kubectlJSON(t, &csr, "get", "csr", forged.name); err != nil {
					return err
				}
				if hasCondition(csr, certificatesv1.CertificateApproved, "KubebootNodeServingCertificate") {
					t.Fatalf("CSR %s (for node %s, DNS %s) was approved", forged.name, forged.node, forged.dns)
				}
				if !hasCondition(csr, certificatesv1.CertificateDenied, forged.reason) {
					return fmt.Errorf("conditions %+v, want Denied with reason %s", csr.Status.Conditions, forged.reason)
				}
				return nil
			})
		})
	}
}

// writeServingCSR writes a kubelet-serving CertificateSigningRequest named
// name for node, asking for dns and w1's address.
func writeServingCSR(t *testing.T, path, name, node, dns string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
		DNSNames:    []string{dns},
		IPAddresses: []net.IP{net.ParseIP("10.89.8.11")},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	request := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
	if err := os.WriteFile(path, []byte(fmt.Sprintf(`apiVersion: certificates.k8s.io/v1
kind: CertificateSigningRequest
metadata:
  name: %s
spec:
  signerName: kubernetes.io/kubelet-serving
  usages: [digital signature, server auth]
  request: %s
`, name, request)), 0o600); err != nil {
		t.Fatal(err)
	}
}

// checkRefusedJoins runs kubeboot join in w1's network namespace as a new
// node, each time in a fresh directory, with discovery that must fail, and
// checks the error and that no file of the join was written.
func checkRefusedJoins(t *testing.T, c *labCluster) {
	first := filepath.Join(c.root, "c", "cp1", "kubeboot.yaml")
	valid := createToken(t, c, first)
	deleted := createToken(t, c, first)
	if r := c.inNode(t, "cp1", kubebootBin, "token", "delete", deleted.id, "--config", first); r.code != 0 {
		t.Fatalf("token delete: exit %d: %s", r.code, r.stderr)
	}
	// A token Secret that expired a minute ago: the bootstrapsigner does
	// not sign cluster-info for it.
	expiredID, expiredSecret := "e2eexp", "0123456789abcdef"
	c.kubectl(t, "-n", "kube-system", "create", "secret", "generic", "bootstrap-token-"+expiredID,
		"--type", "bootstrap.kubernetes.io/token",
		"--from-literal=token-id="+expiredID, "--from-literal=token-secret="+expiredSecret,
		"--from-literal=expiration="+time.Now().Add(-time.Minute).UTC().Format(time.RFC3339),
		"--from-literal=usage-bootstrap-authentication=true", "--from-literal=usage-bootstrap-signing=true",
		"--from-literal=auth-extra-groups=system:bootstrappers:kubeadm:default-node-token")

	endpoint := "10.89.8.10:6443"
	for _, tc := range []struct {
		name, endpoint, token, hash, node, want string
	}{
		{"expired token", endpoint, expiredID + "." + expiredSecret, valid.hash, "w9", "unknown, expired or deleted"},
		{"deleted token", endpoint, deleted.token, valid.hash, "w9", "unknown, expired or deleted"},
		{"wrong CA hash", endpoint, valid.token, "sha256:" + strings.Repeat("0", 64), "w9", "sha256:" + strings.Repeat("0", 64)},
		{"unreachable endpoint", "10.89.8.250:6443", valid.token, valid.hash, "w9", "10.89.8.250:6443"},
		{"name of a Ready node", endpoint, valid.token, valid.hash, "w1", "NodeName"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(c.root, "refused", strings.ReplaceAll(tc.name, " ", "-"))
			config := filepath.Join(c.root, "refused", strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(config, []byte(fmt.Sprintf(`apiVersion: kubeboot.io/v1alpha1
kind: WorkerConfiguration
node: {name: %s}
discovery: {apiServerEndpoint: "%s", token: "%s", caCertHashes: ["%s"]}
certificates: {dir: %s/pki}
paths: {manifestsDir: %s/manifests, kubeconfigDir: %s}
kubelet: {configFile: %s/kubelet/config.yaml, containerRuntimeEndpoint: "unix://%s/cri.sock"}
timeouts: {discovery: 20s}
`, tc.node, tc.endpoint, tc.token, tc.hash, dir, dir, dir, dir, dir)), 0o600); err != nil {
				t.Fatal(err)
			}
			r := c.inNode(t, "w1", kubebootBin, "join", "--config", config)
			if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("join exited %d, want a failure naming %q:\n%s", r.code, tc.want, r.stderr)
			}
			for _, secret := range []string{valid.token, deleted.token, expiredSecret} {
				if s := strings.SplitN(secret, ".", 2); strings.Contains(r.stderr, s[len(s)-1]) {
					t.Errorf("the error shows a token's secret:\n%s", r.stderr)
				}
			}
			for _, file := range []string{"pki/ca.crt", "bootstrap-kubelet.conf", "kubelet.conf", "kubelet/config.yaml"} {
				if _, err := os.Stat(filepath.Join(dir, file)); err == nil {
					t.Errorf("the refused join wrote %s", file)
				}
			}
			if tmp := tempFiles(dir); len(tmp) > 0 {
				t.Errorf("the refused join left temp files: %v", tmp)
			}
		})
	}
}

// clusterToken is a bootstrap token and the CA's hash.
type clusterToken struct{ id, token, hash string }

// createToken creates a token on the first node with kubeboot token create.
func createToken(t *testing.T, c *labCluster, config string) clusterToken {
	t.Helper()
	r := c.inNode(t, "cp1", kubebootBin, "token", "create", "--config", config, "--print-join-command")
	if r.code != 0 {
		t.Fatalf("token create: exit %d: %s", r.code, r.stderr)
	}
	fields := strings.Fields(r.stdout)
	i, j := slices.Index(fields, "--token"), slices.Index(fields, "--discovery-token-ca-cert-hash")
	if i < 0 || j < 0 || i+1 >= len(fields) || j+1 >= len(fields) {
		t.Fatalf("token create printed no join command: %q", r.stdout)
	}
	token := fields[i+1]
	return clusterToken{id: strings.SplitN(token, ".", 2)[0], token: token, hash: fields[j+1]}
}

// checkKubeadmCommands runs the real kubeadm's certs check-expiration and
// upgrade plan on the control-plane node, in a mount namespace where
// /etc/kubernetes is the node's directory (kubeadm reads its fixed paths),
// with /etc overlaid so that nothing of the host's changes.
func checkKubeadmCommands(t *testing.T, c *labCluster) {
	dir := filepath.Join(c.root, "c", "cp1")
	overlay := filepath.Join(c.root, "kubeadm-etc")
	for _, d := range []string{"upper", "work"} {
		if err := os.MkdirAll(filepath.Join(overlay, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	kubeadm := filepath.Join(binDir, "kubeadm")
	// kubeadm v1.36's upgrade plan checks the CoreDNS it would migrate:
	// kubeboot's has kubeadm's shape, so that no check is ignored. The
	// version is given, so that it asks no server online.
	script := fmt.Sprintf(`set -e
mount -t overlay overlay -o lowerdir=/etc,upperdir=%[1]s/upper,workdir=%[1]s/work /etc
mkdir -p /etc/kubernetes
mount --bind %[2]s /etc/kubernetes
echo '== check-expiration'
%[3]s certs check-expiration
echo '== upgrade plan'
PATH=%[4]s:$PATH %[3]s upgrade plan v1.36.3
`, overlay, dir, kubeadm, binDir)
	r := c.inNode(t, "cp1", "unshare", "--mount", "--propagation", "private", "sh", "-c", script)
	out := r.stdout + r.stderr
	if r.code != 0 {
		t.Fatalf("kubeadm on the control plane exited %d:\n%s", r.code, out)
	}
	for _, bad := range []string{"MISSING", "Error reading configuration from the Cluster", "error"} {
		if strings.Contains(out, bad) {
			t.Errorf("kubeadm's output has %q:\n%s", bad, out)
		}
	}
	for _, want := range []string{"admin.conf", "apiserver-etcd-client", "front-proxy-ca", "[upgrade/versions] Cluster version: 1.36.3"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubeadm's output lacks %q:\n%s", want, out)
		}
	}
}

// readFileIfAny is the file's content, or nothing.
func readFileIfAny(path string) []byte {
	data, _ := os.ReadFile(path)
	return data
}

// readyMessage is the message of the Node's Ready condition.
func readyMessage(n corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Message
		}
	}
	return "no Ready condition"
}
