//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/bootstrap"
	"github.com/kubeboot/kubeboot/internal/machine"
	"github.com/kubeboot/kubeboot/internal/testsupport"
	"github.com/kubeboot/kubeboot/pki"
)

// A CA rotation on the fleet of a cluster's life: `certs rotate-ca` from
// the host, killed once and resumed, while the Service is probed; then
// every node trusts the new CA alone, and nodes join with its pin.

// probeAgain probes the Service of probeService again, from w1.
func (f *fleet) probeAgain(t *testing.T) *serviceProbe {
	t.Helper()
	clusterIP := f.kubectl(t, "get", "service", "web", "-o", "jsonpath={.spec.clusterIP}")
	return newServiceProbe("/run/netns/"+f.cl.Netns("w1"), "http://"+clusterIP+"/hostname")
}

// rotateCANodeDown stops m's kubelet until its Node is not Ready, has
// `certs rotate-ca` refuse, naming it, with nothing changed, then starts
// the kubelet again and waits for the Node to be Ready.
func (f *fleet) rotateCANodeDown(t *testing.T, m machine.Machine) {
	t.Helper()
	inMachine(t, m, "systemctl", "stop", "kubelet")
	f.kubectlWait(t, m.Name+" to be not Ready", func(out string) bool { return out != "True" },
		"get", "node", m.Name, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	before := readFile(t, f.kubeconfig)
	r := runCommand(t, kubebootBin, "certs", "rotate-ca", "--kubeconfig", f.kubeconfig)
	if r.code != 1 || !strings.Contains(r.stderr, "node "+m.Name+" is not Ready: every node takes part in a CA rotation") {
		t.Errorf("certs rotate-ca with %s down: exit %d:\n%s", m.Name, r.code, r.stderr)
	}
	if got := f.kubectl(t, "-n", "kube-system", "get", "configmaps,secrets", "-o", "name"); strings.Contains(got, "kubeboot-rotate-ca") {
		t.Errorf("a refused rotation left its state or its Secret: %s", got)
	}
	if after := readFile(t, f.kubeconfig); !bytes.Equal(after, before) {
		t.Error("a refused rotation changed the kubeconfig")
	}
	inMachine(t, m, "systemctl", "start", "kubelet")
	f.kubectlWait(t, m.Name+" to be Ready again", func(out string) bool { return out == "True" },
		"get", "node", m.Name, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
}

// rotateCAKilled rotates the fleet's CAs with `kubeboot certs rotate-ca`
// from the host, through the lab's kubeconfig, which it rewrites: a first
// run is killed (SIGKILL) once cp2's reissue pod runs, and a second takes
// up there, waiting for that pod. It returns how long the whole took.
func (f *fleet) rotateCAKilled(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	args := []string{"certs", "rotate-ca", "--kubeconfig", f.kubeconfig, "-o", "json"}
	events := killedAt(t, args, 20*time.Minute, "cp2's reissue pod started", func(line string) bool {
		return strings.Contains(line, `"node":"cp2"`) && strings.Contains(line, `"step":"reissue"`) && strings.Contains(line, "runs on the node")
	})
	t.Logf("TIMING: the first certs rotate-ca, SIGKILLed while cp2's reissue pod ran: %s", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	r := run(t, ctx, exec.CommandContext(ctx, kubebootBin, args...))
	if r.code != 0 {
		t.Fatalf("certs rotate-ca again: exit %d:\n%s\n%s", r.code, testsupport.LastLines(r.stdout, 40), r.stderr)
	}
	for _, want := range []string{"resuming the CA rotation", `after its step \"restart-pods\"`, "waiting for pod kube-system/kubeboot-rotate-ca-reissue-cp2, which a stopped run started"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the second certs rotate-ca does not say %q:\n%s", want, r.stdout)
		}
	}
	var steps []string
	for line := range strings.Lines(strings.Join(events, "\n") + "\n" + r.stdout) {
		if strings.Contains(line, `"msg":"started"`) || strings.Contains(line, `"msg":"done in `) || strings.Contains(line, "restarting ") {
			steps = append(steps, strings.TrimSpace(line))
		}
	}
	t.Logf("TIMING: the second certs rotate-ca, which took up at cp2's reissue: %s; its result:\n%s\nthe steps of both runs:\n%s",
		r.took.Round(time.Millisecond), testsupport.LastLines(r.stdout, 1), strings.Join(steps, "\n"))
	return time.Since(start)
}

// checkRotated checks that every node, cluster-info and the lab's
// kubeconfig trust the new cluster CA alone, not old, and that every
// kubelet holds a client certificate it signed.
func (f *fleet) checkRotated(t *testing.T, old []byte) []byte {
	t.Helper()
	cp1 := f.m[0]
	ca := readFile(t, filepath.Join(cp1.Root(), "etc/kubernetes/pki/ca.crt"))
	if bytes.Equal(ca, old) || bytes.Count(ca, []byte("BEGIN CERTIFICATE")) != 1 {
		t.Fatalf("cp1's ca.crt after the rotation:\n%s", ca)
	}
	for _, m := range f.m {
		if got := readFile(t, filepath.Join(m.Root(), "etc/kubernetes/pki/ca.crt")); !bytes.Equal(got, ca) {
			t.Errorf("%s's ca.crt is not cp1's new CA alone:\n%s", m.Name, got)
		}
		path := filepath.Join(m.Root(), "var/lib/kubelet/pki/kubelet-client-current.pem")
		if target, err := os.Readlink(path); err == nil {
			path = filepath.Join(m.Root(), target)
		}
		if cert := readFile(t, path); !pki.SignedBy(cert, ca) {
			t.Errorf("%s's kubelet client certificate is not signed by the new CA", m.Name)
		}
	}
	for _, etcdCA := range []string{"etc/kubernetes/pki/etcd/ca.crt", "etc/kubernetes/pki/front-proxy-ca.crt", "etc/kubernetes/pki/sa.pub"} {
		a, b := readFile(t, filepath.Join(cp1.Root(), etcdCA)), readFile(t, filepath.Join(f.m[1].Root(), etcdCA))
		if !bytes.Equal(a, b) || bytes.Count(a, []byte("-----BEGIN")) != 1 {
			t.Errorf("%s: cp1's and cp2's differ, or hold more than one:\n%s\n%s", etcdCA, a, b)
		}
	}
	info := f.kubectl(t, "-n", "kube-public", "get", "configmap", "cluster-info", "-o", "jsonpath={.data.kubeconfig}")
	if got, err := pki.KubeconfigCA([]byte(info)); err != nil || !bytes.Equal(got, ca) {
		t.Errorf("cluster-info does not trust the new CA alone (%v)", err)
	}
	if got, err := pki.KubeconfigCA(readFile(t, f.kubeconfig)); err != nil || !bytes.Equal(got, ca) {
		t.Errorf("the lab's kubeconfig does not trust the new CA alone (%v)", err)
	}
	if out, err := exec.Command("kubectl", "--kubeconfig", f.kubeconfig, "get", "nodes", "-o", "name").CombinedOutput(); err != nil || strings.Count(string(out), "node/") != len(f.m) {
		t.Errorf("kubectl on the host through the rewritten kubeconfig: %v: %s", err, out)
	}
	// cp1's file, which carried the first CA, carries the new one.
	if file := readFile(t, filepath.Join(cp1.Root(), bootstrap.ConfigPath)); !bytes.Contains(file, bytes.Split(ca, []byte("\n"))[1]) {
		t.Errorf("cp1's %s does not carry the new CA", bootstrap.ConfigPath)
	}
	if got := f.kubectl(t, "-n", "kube-system", "get", "secrets", "-o", "name"); strings.Contains(got, "kubeboot-rotate-ca") {
		t.Errorf("the rotation's Secret is left: %s", got)
	}
	// The pods' projected CA, and the pods restarted for it.
	if got := f.kubectl(t, "get", "configmap", "kube-root-ca.crt", "-o", `jsonpath={.data.ca\.crt}`); strings.TrimSpace(got) != strings.TrimSpace(string(ca)) {
		t.Errorf("kube-root-ca.crt does not hold the new CA alone:\n%s", got)
	}
	if got := f.kubectl(t, "get", "deployment", "web", "-o", `jsonpath={.spec.template.metadata.annotations.kubeboot\.io/rotate-ca}`); !strings.HasSuffix(got, "-refresh-pods") {
		t.Errorf("the web Deployment was not restarted for the new tokens: %q", got)
	}
	return ca
}

// joinWithNewPin has w3, which `kubeadm join` joined, and w2, which
// kubeboot joined, leave and join again with a token the host's
// kubeconfig makes and the new CA's pin; the old pin is refused.
func (f *fleet) joinWithNewPin(t *testing.T, old []byte) {
	t.Helper()
	w2, w3 := f.m[3], f.m[4]
	r := runCommand(t, kubebootBin, "token", "create", "--kubeconfig", f.kubeconfig, "--print-join-command")
	fields := strings.Fields(r.stdout)
	k, h := slices.Index(fields, "--token"), slices.Index(fields, "--discovery-token-ca-cert-hash")
	if r.code != 0 || k < 0 || h < 0 || k+1 >= len(fields) || h+1 >= len(fields) {
		t.Fatalf("token create --kubeconfig: exit %d: %q %s", r.code, r.stdout, r.stderr)
	}
	token, pin := fields[k+1], fields[h+1]
	if want := caHash(t, f.m[0]); pin != want {
		t.Errorf("token create prints the pin %s, want the new CA's %s", pin, want)
	}
	oldPin, err := pki.CACertHash(old)
	if err != nil {
		t.Fatal(err)
	}
	endpoint := f.cl.Endpoint().String()

	inMachine(t, w3, "kubeadm", "reset", "--force")
	f.kubectl(t, "delete", "node", "w3")
	start := time.Now()
	join := inMachine(t, w3, "kubeadm", "join", endpoint, "--token", token, "--discovery-token-ca-cert-hash", pin,
		"--node-name", "w3", "--ignore-preflight-errors", "SystemVerification,Swap,FileContent--proc-sys-net-bridge-bridge-nf-call-iptables")
	if !strings.Contains(join, "This node has joined the cluster") {
		t.Errorf("kubeadm join with the new pin:\n%s", testsupport.LastLines(join, 20))
	}
	t.Logf("TIMING: kubeadm join of w3 with the new pin: %s", time.Since(start).Round(time.Millisecond))

	if code, out := kubebootIn(w2, "reset", "--config", bootstrap.ConfigPath); code != 0 {
		t.Fatalf("reset on w2: exit %d:\n%s", code, out)
	}
	f.kubectl(t, "delete", "node", "w2")
	// w2's file pins the old CA: refused, naming both; the same file with
	// the new pin, as its administrator writes it, joins.
	if code, out := kubebootIn(w2, "join", "--config", bootstrap.ConfigPath); code == 0 || !strings.Contains(out, "the cluster's CA has hash "+pin+", not the pinned "+oldPin) {
		t.Errorf("kubeboot join with the old pin: exit %d:\n%s", code, out)
	}
	file := readFile(t, filepath.Join(w2.Root(), bootstrap.ConfigPath))
	if !bytes.Contains(file, []byte(oldPin)) {
		t.Fatalf("w2's file does not pin the old CA %s", oldPin)
	}
	writeFile(t, filepath.Join(w2.Root(), "root/join.yaml"), strings.ReplaceAll(string(file), oldPin, pin))
	start = time.Now()
	if code, out := kubebootIn(w2, "join", "--config", "/root/join.yaml"); code != 0 {
		t.Fatalf("kubeboot join of w2 with the new pin: exit %d:\n%s", code, out)
	}
	t.Logf("TIMING: kubeboot join of w2 with the new pin: %s", time.Since(start).Round(time.Millisecond))
	for _, node := range []string{"w2", "w3"} {
		f.kubectlWait(t, node+" to be Ready", func(out string) bool { return out == "True" },
			"get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	}
}
