//go:build e2e

package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kubeboot/kubeboot/internal/bootstrap"
	"github.com/kubeboot/kubeboot/internal/controlplane"
	"github.com/kubeboot/kubeboot/internal/machine"
)

// workerNames are TestMachines' workers: w1 joins with kubeboot join,
// w2 with the real kubeadm join.
var workerNames = []string{"w1", "w2"}

// checkResetWorker: kubeboot reset --delete-node on the worker stops its
// kubelet and removes what its join wrote (kubelet.conf, the kubelet's
// configuration, the cluster CA) and its Node; joins with bad discovery
// are then refused, writing nothing (checkRefusedJoins); its bootstrap
// unit, run again, joins it, Ready with a new client certificate.
func checkResetWorker(t *testing.T, c *machineCluster, name string) {
	m := c.machine(t, name)
	before := clientSerial(t, m)
	// The control plane's admin.conf, for --delete-node.
	writeFile(t, filepath.Join(m.Root(), "root/admin.conf"), string(readFile(t, filepath.Join(c.machine(t, "cp1").Root(), "etc/kubernetes/admin.conf"))))
	r := runCommand(t, kubebootBin, "lab", "exec", "--cluster", c.desc, name, "--",
		"kubeboot", "reset", "--config", bootstrap.ConfigPath, "--delete-node", "--kubeconfig", "/root/admin.conf")
	if r.code != 0 || !strings.Contains(r.stderr, "deleted Node "+name) {
		t.Fatalf("reset --delete-node of %s exited %d:\n%s", name, r.code, r.stderr)
	}
	for _, gone := range []string{"etc/kubernetes/kubelet.conf", "var/lib/kubelet/config.yaml", "etc/kubernetes/pki/ca.crt"} {
		if _, err := os.Lstat(filepath.Join(m.Root(), gone)); !os.IsNotExist(err) {
			t.Errorf("/%s is still there after reset: %v", gone, err)
		}
	}
	if got := c.exec(t, name, "sh", "-c", "systemctl is-active kubelet || true"); got != "inactive" {
		t.Errorf("kubelet.service after reset: %s", got)
	}
	if _, err := c.kubectlErr(t, "get", "node", name); err == nil || !strings.Contains(err.Error(), "NotFound") {
		t.Errorf("Node %s after reset --delete-node: %v", name, err)
	}
	t.Run("refused joins write nothing", func(t *testing.T) { checkRefusedJoins(t, c, m) })
	start := time.Now()
	c.exec(t, name, "systemctl", "restart", "kubeboot-bootstrap")
	t.Logf("TIMING: %s's bootstrap unit, run again after reset, until it has joined: %s", name, time.Since(start).Round(time.Millisecond))
	c.readyNodes(t, 3)
	if after := clientSerial(t, m); after == before {
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

// checkForgedCSRs posts kubelet-serving CSRs that must not be approved:
// with w1's own kubelet credentials, one for w1 that asks for a name that
// is not w1's (the approver denies it) and one for w2 (the API server's
// node restriction refuses it before the approver sees it); and with the
// admin's, one for w2 (the approver denies it: not a node's request).
func checkForgedCSRs(t *testing.T, c *machineCluster) {
	w1 := c.machine(t, "w1")
	asW1 := func(t *testing.T, manifest string) result {
		writeFile(t, filepath.Join(w1.Root(), "root/csr.yaml"), string(readFile(t, manifest)))
		return runCommand(t, kubebootBin, "lab", "exec", "--cluster", c.desc, "w1", "--", "kubectl", "--kubeconfig", "/etc/kubernetes/kubelet.conf", "create", "-f", "/root/csr.yaml")
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

// checkRefusedJoins runs kubeboot join on m, a worker that has been
// reset, each time with its files in a fresh directory, with discovery that
// must fail, and checks the error and that no file of the join was
// written.
func checkRefusedJoins(t *testing.T, c *machineCluster, m machine.Machine) {
	valid := createToken(t, c)
	endpoint := "10.89.8.10:6443"
	// From the host, through the lab's kubeconfig (its server on this
	// host's loopback), the join command still names the cluster's
	// endpoint and CA, as cluster-info publishes them.
	deleted := createTokenFromHost(t, c)
	if deleted.endpoint != endpoint || deleted.hash != valid.hash {
		t.Errorf("token create --kubeconfig: join command to %s pinning %s, want %s pinning %s", deleted.endpoint, deleted.hash, endpoint, valid.hash)
	}
	if r := runCommand(t, kubebootBin, "token", "delete", deleted.id, "--kubeconfig", c.kubeconfig); r.code != 0 {
		t.Fatalf("token delete --kubeconfig: exit %d: %s", r.code, r.stderr)
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

	// The cases that get past discovery need cluster-info signed for the
	// valid token, which the bootstrapsigner does within moments.
	eventually(t, "cluster-info signed for token "+valid.id, func() error {
		if c.kubectl(t, "-n", "kube-public", "get", "configmap", "cluster-info", "-o", "jsonpath={.data.jws-kubeconfig-"+valid.id+"}") == "" {
			return fmt.Errorf("no signature jws-kubeconfig-%s yet", valid.id)
		}
		return nil
	})
	for _, tc := range []struct {
		name, endpoint, token, hash, node, want string
	}{
		{"expired token", endpoint, expiredID + "." + expiredSecret, valid.hash, "w9", "unknown, expired or deleted"},
		{"deleted token", endpoint, deleted.token, valid.hash, "w9", "unknown, expired or deleted"},
		{"wrong CA hash", endpoint, valid.token, "sha256:" + strings.Repeat("0", 64), "w9", "sha256:" + strings.Repeat("0", 64)},
		{"unreachable endpoint", "10.89.8.250:6443", valid.token, valid.hash, "w9", "10.89.8.250:6443"},
		{"name of a Ready node", endpoint, valid.token, valid.hash, "w2", "NodeName"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := "/var/lib/kubeboot-refused/" + strings.ReplaceAll(tc.name, " ", "-")
			writeFile(t, filepath.Join(m.Root(), dir+".yaml"), fmt.Sprintf(`apiVersion: kubeboot.io/v1alpha1
kind: WorkerConfiguration
node: {name: %s}
discovery: {apiServerEndpoint: "%s", token: "%s", caCertHashes: ["%s"]}
certificates: {dir: %s/pki}
paths: {manifestsDir: %s/manifests, kubeconfigDir: %s}
kubelet: {configFile: %s/kubelet/config.yaml}
timeouts: {discovery: 5s}
`, tc.node, tc.endpoint, tc.token, tc.hash, dir, dir, dir, dir))
			if err := os.MkdirAll(filepath.Join(m.Root(), dir), 0o700); err != nil {
				t.Fatal(err)
			}
			r := runCommand(t, kubebootBin, "lab", "exec", "--cluster", c.desc, m.Name, "--", "kubeboot", "join", "--config", dir+".yaml")
			if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("join exited %d, want a failure naming %q:\n%s", r.code, tc.want, r.stderr)
			}
			for _, secret := range []string{valid.token, deleted.token, expiredSecret} {
				if s := strings.SplitN(secret, ".", 2); strings.Contains(r.stderr, s[len(s)-1]) {
					t.Errorf("the error shows a token's secret:\n%s", r.stderr)
				}
			}
			for _, file := range []string{"pki/ca.crt", "bootstrap-kubelet.conf", "kubelet.conf", "kubelet/config.yaml"} {
				if _, err := os.Stat(filepath.Join(m.Root(), dir, file)); err == nil {
					t.Errorf("the refused join wrote %s", file)
				}
			}
			if tmp := tempFiles(filepath.Join(m.Root(), dir)); len(tmp) > 0 {
				t.Errorf("the refused join left temp files: %v", tmp)
			}
		})
	}
}

// clusterToken is a bootstrap token, the endpoint and the CA's hash of
// its join command.
type clusterToken struct{ id, token, endpoint, hash string }

// createToken creates a token on the first node with kubeboot token create.
func createToken(t *testing.T, c *machineCluster) clusterToken {
	t.Helper()
	return joinCommandToken(t, c.exec(t, "cp1", "kubeboot", "token", "create", "--config", bootstrap.ConfigPath, "--print-join-command"))
}

// createTokenFromHost creates a token from this host with the lab's
// kubeconfig, as an administrator does from their machine.
func createTokenFromHost(t *testing.T, c *machineCluster) clusterToken {
	t.Helper()
	r := runCommand(t, kubebootBin, "token", "create", "--print-join-command", "--kubeconfig", c.kubeconfig)
	if r.code != 0 {
		t.Fatalf("token create --kubeconfig: exit %d: %s", r.code, r.stderr)
	}
	return joinCommandToken(t, r.stdout)
}

// checkPlanFromHost runs upgrade plan on the host, with the lab's
// kubeconfig and no node's configuration: it plans from the configuration
// the cluster keeps, with every node and upgrade apply on cp1 first.
func checkPlanFromHost(t *testing.T, c *machineCluster) {
	r := runCommand(t, kubebootBin, "upgrade", "plan", "v1.36.3", "--kubeconfig", c.kubeconfig, "-o", "json")
	var plan controlplane.UpgradePlan
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &plan) != nil {
		t.Fatalf("upgrade plan --kubeconfig: exit %d, %q, %s", r.code, r.stdout, r.stderr)
	}
	nodes := strings.Fields(c.kubectl(t, "get", "nodes", "-o", "jsonpath={.items[*].metadata.name}"))
	if plan.Target != "v1.36.3" || len(plan.Nodes) != len(nodes) || len(plan.Steps) == 0 ||
		!strings.HasPrefix(plan.Steps[0], "on cp1: ") || !strings.Contains(plan.Steps[0], "upgrade apply") {
		t.Errorf("upgrade plan --kubeconfig: %+v; want v1.36.3, the nodes %v, and upgrade apply on cp1 first", plan, nodes)
	}
}

// joinCommandToken reads the token, endpoint and pin of a join command.
func joinCommandToken(t *testing.T, command string) clusterToken {
	t.Helper()
	fields := strings.Fields(command)
	i, j := slices.Index(fields, "--token"), slices.Index(fields, "--discovery-token-ca-cert-hash")
	if len(fields) < 3 || i < 0 || j < 0 || i+1 >= len(fields) || j+1 >= len(fields) {
		t.Fatalf("token create printed no join command: %q", fields)
	}
	token := fields[i+1]
	return clusterToken{id: strings.SplitN(token, ".", 2)[0], token: token, endpoint: fields[2], hash: fields[j+1]}
}

// checkKubeadmCommands runs the real kubeadm's certs check-expiration and
// upgrade plan on the control-plane node, which read kubeboot's files at
// kubeadm's paths and the cluster's kubeadm-config.
func checkKubeadmCommands(t *testing.T, c *machineCluster) {
	// kubeadm v1.36's upgrade plan checks the CoreDNS it would migrate:
	// kubeboot's has kubeadm's shape, so that no check is ignored. The
	// version is given, so that it asks no server online.
	r := runCommand(t, kubebootBin, "lab", "exec", "--cluster", c.desc, "cp1", "--", "sh", "-c",
		"echo '== check-expiration'; kubeadm certs check-expiration && echo '== upgrade plan' && kubeadm upgrade plan v1.36.3")
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

// readyMessage is the message of the Node's Ready condition.
func readyMessage(n corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Message
		}
	}
	return "no Ready condition"
}
