//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

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
	l := newMachineLab(t, "kcp", "10.89.243.0/24", "cp1:control-plane", "cp2:control-plane")
	l.startLoadBalancer(t)
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
networking: {podSubnet: 10.245.0.0/16}
bootstrapTokens: [{token: %s}]
certificateKey: %s
kubelet:
  extraConfig:%s
addons: {kubeProxy: {extraConfig: {conntrack: {maxPerCore: 0}}}}
security: {encryptionAtRest: {enabled: false}}
`, l.cl.Name, l.cl.Endpoint(), l.cl.Address(0), fleetToken, certKey, kubeletSettings)
	l.images(t, cfg, nil)
	cp1 := l.machine(t, 0, cfg)
	if err := cp1.Boot(ctx); err != nil {
		t.Fatal(err)
	}
	waitBootstrapped(t, cp1)
	cp2 := l.machine(t, 1, "")
	if err := cp2.Boot(ctx); err != nil {
		t.Fatal(err)
	}
	// kubeadm's preflight wants the control plane's images in containerd.
	waitMachine(t, cp2, "the images loaded on cp2", func(out string) bool { return out == "active" },
		"sh", "-c", "systemctl is-active kubeboot-lab-images || true")
	var out strings.Builder
	start := time.Now()
	if err := cp2.Run(ctx, nil, &out, &out, "kubeadm", "join", l.cl.Endpoint().String(), "--token", fleetToken,
		"--discovery-token-ca-cert-hash", caHash(t, cp1), "--control-plane", "--certificate-key", certKey, "--node-name", "cp2",
		"--apiserver-advertise-address", l.cl.Address(1).String(),
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
	got := inMachine(t, cp2, "kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf", "--server", "https://"+l.cl.Address(1).String()+":6443",
		"-n", "kube-system", "get", "secret", "bootstrap-token-abcdef", "-o", "jsonpath={.data.token-id}")
	if got != "YWJjZGVm" { // base64 of abcdef
		t.Errorf("cp2's API server reads the token's Secret as %q", got)
	}
}
