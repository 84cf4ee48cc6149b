//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/lab"
	"github.com/kubeboot/kubeboot/internal/testsupport"
)

// TestKubeadmJoinsTheControlPlane: stock `kubeadm join --control-plane
// --certificate-key` joins a kubeboot cluster whose first node uploaded
// the cluster secrets (certificateKey) with Secrets not encrypted at rest:
// it decrypts kubeadm-certs, joins etcd, and its node is Ready, its API
// server serving the cluster's Secrets. (With encryption at rest, as
// kubeboot's default, kubeadm's API server could not read them: it writes
// no encryption config, and init says so.)
func TestKubeadmJoinsTheControlPlane(t *testing.T) {
	alongside(t)
	ctx := context.Background()
	l := newBootLab(t, "kcp", "10.89.243.0/24", "10.243.0.0/16", "\n- {name: cp1, role: control-plane}\n- {name: cp2, role: control-plane}\n")
	r := runCommand(t, kubebootBin, "certs", "certificate-key")
	certKey := strings.TrimSpace(r.stdout)
	if r.code != 0 || len(certKey) != 64 {
		t.Fatalf("certs certificate-key: exit %d, %s", r.code, r.stderr)
	}
	cfg := fmt.Sprintf(`apiVersion: kubeboot.io/v1alpha1
kind: ClusterConfiguration
clusterName: %s
controlPlaneEndpoint: %s
node: {name: cp1, advertiseAddress: %s}
networking: {podSubnet: %s}
bootstrapTokens: [{token: %s}]
certificateKey: %s
kubelet:
  extraConfig:%s
addons: {kubeProxy: {extraConfig: {conntrack: {maxPerCore: 0}}}}
security: {encryptionAtRest: {enabled: false}}
`, l.Cluster.Name, l.Cluster.Endpoint(), l.Cluster.Address(0), l.Cluster.PodSubnet, fleetToken, certKey, kubeletSettings)
	// cp1 brings itself up from its file; cp2, with no file, holds the
	// control plane's images, which kubeadm's preflight wants.
	l.boot(t, lab.Inputs{Files: [][]byte{[]byte(cfg)}, ImageConfigs: [][]byte{[]byte(cfg)}})
	cp1, cp2 := l.machine(t, "cp1"), l.machine(t, "cp2")
	waitBootstrapped(t, cp1)
	var out strings.Builder
	start := time.Now()
	if err := cp2.Run(ctx, nil, &out, &out, "kubeadm", "join", l.Cluster.Endpoint().String(), "--token", fleetToken,
		"--discovery-token-ca-cert-hash", caHash(t, cp1), "--control-plane", "--certificate-key", certKey, "--node-name", "cp2",
		"--apiserver-advertise-address", l.Cluster.Address(1).String(),
		"--ignore-preflight-errors", "SystemVerification,Swap,FileContent--proc-sys-net-bridge-bridge-nf-call-iptables"); err != nil {
		t.Fatalf("kubeadm join --control-plane: %v\n%s", err, testsupport.LastLines(out.String(), 40))
	}
	t.Logf("TIMING: kubeadm join --control-plane: %s", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(out.String(), `[download-certs] Downloading the certificates in Secret "kubeadm-certs"`) {
		t.Errorf("kubeadm did not take the secrets from kubeadm-certs:\n%s", out.String())
	}
	kubectl := []string{"kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf"}
	waitMachine(t, cp1, "Node cp2 to be Ready", func(out string) bool { return out == "True" },
		append(kubectl, "get", "node", "cp2", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)...)
	waitMachine(t, cp1, "etcd-cp2 to run", func(out string) bool { return out == "Running" },
		append(kubectl, "-n", "kube-system", "get", "pod", "etcd-cp2", "-o", "jsonpath={.status.phase}")...)
	// cp2's own API server, with its own admin.conf, reads the Secret of
	// the fleet's token, which cp1's init created.
	got := inMachine(t, cp2, "kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf", "--server", "https://"+l.Cluster.Address(1).String()+":6443",
		"-n", "kube-system", "get", "secret", "bootstrap-token-abcdef", "-o", "jsonpath={.data.token-id}")
	if got != "YWJjZGVm" { // base64 of abcdef
		t.Errorf("cp2's API server reads the token's Secret as %q", got)
	}
}
