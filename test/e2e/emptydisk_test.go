//go:build e2e

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/bootstrap"
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/lab"
	"github.com/kubeboot/kubeboot/internal/machine"
	"github.com/kubeboot/kubeboot/internal/testsupport"
)

// TestEmptyDiskFleet: machines whose disks hold only the OS and kubeboot's
// package boot with a kernel command line that names `kubeboot config
// serve` on the lab's network and the fleet CA's pin, fetch their files
// (written by `kubeboot config fleet`) and come up as a cluster: cp1
// inits, w1 joins with the token bound to it (checkNodeBound). A third
// machine, x1, then meets each failure in turn,
// and each ends with its reason in x1's journal and no node file on its
// disk: no file for it on the server and an unreachable server are
// retried, another CA's server, a changed file and another node's file
// stop the unit at once. Last, x1 is added to the fleet (addWorker) and
// joins with its own node-bound token, made in the running cluster; cp1,
// its certificates due, renews them at its bootstrap (checkBootRenewal),
// then on the schedule of certificates.scheduledRenewal
// (checkScheduledRenewal).
func TestEmptyDiskFleet(t *testing.T) {
	alongside(t)
	l := newBootLab(t, "pxe", "10.89.244.0/24", "10.246.0.0/16", "\n- {name: cp1, role: control-plane}\n- {name: w1, role: worker}\n- {name: x1, role: worker}\n")
	c := l.Cluster
	hub := c.HubAddress().String()
	description := fmt.Sprintf(`cluster:
  clusterName: pxe
  controlPlaneEndpoint: %[1]s
  networking: {podSubnet: %[2]s}
  kubelet:
    extraConfig:%[3]s
  addons: {kubeProxy: {extraConfig: {conntrack: {maxPerCore: 0}}}}
worker:
  kubelet:
    extraConfig:%[3]s
nodes:
- {name: cp1, role: control-plane, address: %[4]s}
- {name: w1, role: worker, address: %[5]s}
- {name: w9, role: worker, address: 10.89.244.99}
`, c.Endpoint(), c.PodSubnet, strings.ReplaceAll(kubeletSettings, "\n", "\n  "), c.Address(0), c.Address(1))
	fleetDir := writeFleet(t, l.root, "fleet", description)
	pin := strings.TrimSpace(string(readFile(t, filepath.Join(fleetDir, "config-ca-hash"))))
	cmdline := func(port int, query string) string {
		return fmt.Sprintf("ro quiet kubeboot.config=https://%s:%d/v1/node-file?%s kubeboot.config-ca-hash=%s", hub, port, query, pin)
	}
	byMachine := cmdline(8443, "mac={mac}&hostname={hostname}")
	start := time.Now()
	l.boot(t, lab.Inputs{Cmdlines: []string{byMachine, byMachine, byMachine}, ImageConfigs: [][]byte{readFile(t, filepath.Join(fleetDir, "nodes/cp1.yaml"))}})
	// The machines' bootstrap units retry meanwhile: nothing serves yet.
	served := serveFleet(t, c, fleetDir, hub+":8443")

	cp1, w1, x1 := l.machine(t, "cp1"), l.machine(t, "w1"), l.machine(t, "x1")
	waitBootstrapped(t, cp1)
	waitBootstrapped(t, w1)
	t.Logf("TIMING: two empty-disk machines booted, fetched their files and came up: %s", time.Since(start).Round(time.Millisecond))
	waitReady(t, cp1, "cp1=True w1=True")
	for _, m := range []machine.Machine{cp1, w1} {
		journal := inMachine(t, m, "journalctl", "--no-pager", "-o", "cat", "-u", "kubeboot-bootstrap")
		if !strings.Contains(journal, "wrote "+bootstrap.ConfigPath) || !strings.Contains(journal, "signed by the fleet's config CA "+pin) {
			t.Errorf("%s's journal does not say it fetched its file:\n%s", m.Name, testsupport.LastLines(journal, 15))
		}
		if got, want := readFile(t, filepath.Join(m.Root(), bootstrap.ConfigPath)), readFile(t, filepath.Join(fleetDir, "nodes", m.Name+".yaml")); string(got) != string(want) {
			t.Errorf("%s's node file is not its fleet file", m.Name)
		}
	}
	for _, want := range []string{`hostname="cp1": served nodes/cp1.yaml`, `hostname="w1": served nodes/w1.yaml`, `hostname="x1": no node of the fleet has that MAC address or name`} {
		if !strings.Contains(served.String(), want) {
			t.Errorf("config serve's log lacks %q:\n%s", want, served.String())
		}
	}

	checkNodeBound(t, cp1, fleetDir, c.Endpoint().String())

	// x1 is no node of the fleet: the server has none of its file.
	x1Case(t, x1, byMachine, "404 Not Found: no node file for", false)
	x1Case(t, x1, cmdline(8449, "hostname={hostname}"), "connection refused", false)
	other := writeFleet(t, l.root, "other", "nodes:\n- {name: x1, role: control-plane, address: "+c.Address(2).String()+"}\n")
	serveFleet(t, c, other, hub+":8445")
	x1Case(t, x1, cmdline(8445, "hostname={hostname}"), "the server's certificate was not issued by the CA that "+pin+" pins", true)
	w9 := filepath.Join(fleetDir, "nodes/w9.yaml")
	writeFile(t, w9, string(readFile(t, w9))+"# changed after config fleet\n")
	x1Case(t, x1, cmdline(8443, "hostname=w9"), "the node file is not signed by the fleet's config CA", true)
	x1Case(t, x1, cmdline(8443, "hostname=w1"), "the file is for the node at "+c.Address(1).String()+", which is none of this machine's addresses", true)

	addWorker(t, l, fleetDir, description+"- {name: x1, role: worker, address: "+c.Address(2).String()+"}\n")
	writeFile(t, filepath.Join(x1.Root(), lab.CmdlinePath), byMachine+"\n")
	// The failures above left the unit failed, and past systemd's limit of
	// starts in a row.
	inMachine(t, x1, "systemctl", "reset-failed", "kubeboot-bootstrap")
	inMachine(t, x1, "systemctl", "restart", "--no-block", "kubeboot-bootstrap")
	waitBootstrapped(t, x1)
	x1ID, _, _ := strings.Cut(nodeTokens(t, fleetDir)["x1"], ".")
	waitMachine(t, cp1, "x1 Ready, its client CSR approved as node-bound", func(out string) bool { return out == "True KubebootNodeBoundJoin" },
		"sh", "-c", `kubectl --kubeconfig /etc/kubernetes/admin.conf get node x1 -o jsonpath='{.status.conditions[?(@.type=="Ready")].status} ' && `+
			`kubectl --kubeconfig /etc/kubernetes/admin.conf get csr -o jsonpath='{range .items[?(@.spec.username=="system:bootstrap:`+x1ID+`")]}{.status.conditions[0].reason} {end}'`)

	checkBootRenewal(t, cp1, c.Address(0).String())
	checkScheduledRenewal(t, cp1, c.Address(0).String())
}

// editNodeFile sets fields of the certificates section of m's node file
// (nil deletes one), as its administrator does.
func editNodeFile(t *testing.T, m machine.Machine, certificates map[string]any) {
	t.Helper()
	path := filepath.Join(m.Root(), bootstrap.ConfigPath)
	var doc map[string]any
	if err := yaml.Unmarshal(readFile(t, path), &doc); err != nil {
		t.Fatal(err)
	}
	certs, _ := doc["certificates"].(map[string]any)
	for k, v := range certificates {
		if v == nil {
			delete(certs, k)
			continue
		}
		certs[k] = v
	}
	data, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, string(data))
}

// rerunBootstrap runs m's bootstrap unit again, as at a boot, and fails
// the test with its journal if it fails; it returns the journal since.
func rerunBootstrap(t *testing.T, m machine.Machine, what string) string {
	t.Helper()
	since := inMachine(t, m, "date", "+@%s")
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	start := time.Now()
	out, err := m.Output(ctx, "systemctl", "restart", "kubeboot-bootstrap")
	journal := inMachine(t, m, "journalctl", "--no-pager", "-o", "cat", "-u", "kubeboot-bootstrap", "--since", since)
	if err != nil {
		t.Fatalf("bootstrap %s: %v: %s\n%s", what, err, out, testsupport.LastLines(journal, 30))
	}
	t.Logf("TIMING: bootstrap %s: %s", what, time.Since(start).Round(time.Millisecond))
	return journal
}

// checkScheduledRenewal: with certificates.scheduledRenewal set, the
// node's bootstrap installs the timer; once the certificates come due,
// the timer's run renews them and restarts the control plane, each
// component checked to serve its new certificate; without the setting,
// the next bootstrap takes the timer away.
func checkScheduledRenewal(t *testing.T, cp1 machine.Machine, address string) {
	t.Helper()
	editNodeFile(t, cp1, map[string]any{"scheduledRenewal": map[string]any{"interval": "1m"}})
	rerunBootstrap(t, cp1, "installing the renewal timer")
	if got := inMachine(t, cp1, "sh", "-c", "systemctl is-active kubeboot-certs-renew.timer || true"); got != "active" {
		t.Fatalf("kubeboot-certs-renew.timer is %q, want active", got)
	}
	// Every leaf, made valid for 8761h, is now within renewBefore of its end.
	apiserverCert := filepath.Join(cp1.Root(), "etc/kubernetes/pki/apiserver.crt")
	before := readFile(t, apiserverCert)
	editNodeFile(t, cp1, map[string]any{"leafValidity": "8762h", "renewBefore": "8761h"})
	start := time.Now()
	err := wait.PollUntilContextTimeout(context.Background(), 2*time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		out, err := cp1.Output(ctx, "journalctl", "--no-pager", "-o", "cat", "-u", "kubeboot-certs-renew")
		return err == nil && strings.Contains(string(out), "restarted kubelet.service: it serves"), nil
	})
	journal := inMachine(t, cp1, "journalctl", "--no-pager", "-o", "cat", "-u", "kubeboot-certs-renew")
	if err != nil {
		t.Fatalf("the renewal timer renewed nothing in 4m:\n%s", testsupport.LastLines(journal, 30))
	}
	t.Logf("TIMING: certificates come due until the timer's run restarted the control plane: %s", time.Since(start).Round(time.Millisecond))
	if string(readFile(t, apiserverCert)) == string(before) || !strings.Contains(journal, "kube-apiserver restarted: a new instance is healthy") ||
		!strings.Contains(journal, "restarted kubelet.service: it serves /etc/kubernetes/pki/kubelet-server.crt") {
		t.Errorf("the timer's run did not renew and reload the API server's and the kubelet's certificates:\n%s", testsupport.LastLines(journal, 30))
	}
	checkKubeletServes(t, cp1, address)
	waitReady(t, cp1, "cp1=True w1=True x1=True")

	editNodeFile(t, cp1, map[string]any{"scheduledRenewal": nil})
	rerunBootstrap(t, cp1, "without a scheduled renewal")
	for _, unit := range []string{"kubeboot-certs-renew.service", "kubeboot-certs-renew.timer"} {
		if _, err := os.Stat(filepath.Join(cp1.Root(), "etc/systemd/system", unit)); !os.IsNotExist(err) {
			t.Errorf("%s is left without certificates.scheduledRenewal: %v", unit, err)
		}
	}
}

// checkKubeletServes: m's kubelet, on address, serves the serving
// certificate on its disk (kubeboot's, renewed in place).
func checkKubeletServes(t *testing.T, m machine.Machine, address string) {
	t.Helper()
	file := inMachine(t, m, "openssl", "x509", "-noout", "-fingerprint", "-sha256", "-in", "/etc/kubernetes/pki/kubelet-server.crt")
	waitMachine(t, m, "the kubelet to serve "+file, func(out string) bool { return out == file },
		"sh", "-c", "openssl s_client -connect "+address+":10250 </dev/null 2>/dev/null | openssl x509 -noout -fingerprint -sha256")
}

// checkBootRenewal: a control-plane node whose certificates are due
// renews them when its bootstrap unit runs, as at each boot, and restarts
// each component that uses one (each then serving the new certificate, or
// the run fails); the cluster goes on. A component a renewal left running
// on its old files is restarted by the next bootstrap, though nothing is
// due then.
func checkBootRenewal(t *testing.T, cp1 machine.Machine, address string) {
	t.Helper()
	// Every leaf, made valid for 8760h, is within a renewBefore of
	// 8760h30m of its end; the renewed ones, valid for 8761h, are not.
	editNodeFile(t, cp1, map[string]any{"leafValidity": "8761h", "renewBefore": "8760h30m"})
	apiserverCert := filepath.Join(cp1.Root(), "etc/kubernetes/pki/apiserver.crt")
	before := readFile(t, apiserverCert)
	journal := rerunBootstrap(t, cp1, "renewing every leaf and restarting the control plane")
	for _, want := range []string{"renewed ", "restarting what uses the renewed ", "kube-apiserver restarted: a new instance is healthy", "restarted kubelet.service: it serves"} {
		if !strings.Contains(journal, want) {
			t.Errorf("cp1's bootstrap journal lacks %q:\n%s", want, testsupport.LastLines(journal, 30))
		}
	}
	if string(readFile(t, apiserverCert)) == string(before) {
		t.Error("the API server's certificate was not renewed")
	}
	checkKubeletServes(t, cp1, address)
	waitReady(t, cp1, "cp1=True w1=True x1=True")

	// A renewal whose restart never came (a run that failed partway, or
	// here certs renew without --restart): with nothing due, the next
	// bootstrap finds the scheduler running since before its kubeconfig
	// changed, and restarts it.
	inMachine(t, cp1, "kubeboot", "certs", "renew", config.KubeconfigScheduler, "--config", bootstrap.ConfigPath)
	journal = rerunBootstrap(t, cp1, "restarting the scheduler a renewal left on its old kubeconfig")
	for _, want := range []string{"restarting kube-scheduler: it runs since before a certificate or kubeconfig it loads changed", "kube-scheduler restarted: a new instance is healthy"} {
		if !strings.Contains(journal, want) {
			t.Errorf("cp1's bootstrap journal lacks %q:\n%s", want, testsupport.LastLines(journal, 30))
		}
	}
	if strings.Contains(journal, "kube-apiserver restarted") {
		t.Errorf("the bootstrap restarted the API server, which was on its files already:\n%s", testsupport.LastLines(journal, 30))
	}
}

// waitReady waits until the Nodes' Ready conditions, as cp1's kubectl
// lists them ("<name>=<status>" each), are want.
func waitReady(t *testing.T, cp1 machine.Machine, want string) {
	t.Helper()
	waitMachine(t, cp1, want, func(out string) bool { return out == want },
		"kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf", "get", "nodes", "-o", `jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}`)
}

// addWorker adds a worker to the running fleet, as its administrator
// does: `config fleet` of the bigger description writes the new worker's
// file alone (the first node's, with which it ran init, unchanged) and
// says the worker is to admit; run again with --kubeconfig (cp1's
// admin.conf, from the lab's hub, which reaches the API's endpoint), it
// makes the worker's node-bound token in the cluster.
func addWorker(t *testing.T, l *bootLab, fleetDir, description string) {
	t.Helper()
	desc := filepath.Join(l.root, "fleet-added.yaml")
	writeFile(t, desc, "apiVersion: kubeboot.io/v1alpha1\nkind: Fleet\n"+description)
	cp1File := readFile(t, filepath.Join(fleetDir, "nodes/cp1.yaml"))
	r := runCommand(t, kubebootBin, "config", "fleet", "--cluster", desc, "--out", fleetDir, "-o", "json")
	var added struct {
		Written []string `json:"written"`
		ToAdmit []string `json:"toAdmit"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &added) != nil {
		t.Fatalf("config fleet with x1 added: exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
	// w9's file, changed by hand above, is written anew too.
	if want := []string{"node-tokens", "nodes/w9.yaml", "nodes/x1.yaml", "nodes/x1.yaml.sig"}; !slices.Equal(added.Written, want) || !slices.Equal(added.ToAdmit, []string{"x1"}) {
		t.Errorf("config fleet with x1 added wrote %v, want %v; to admit %v, want [x1]", added.Written, want, added.ToAdmit)
	}
	if string(readFile(t, filepath.Join(fleetDir, "nodes/cp1.yaml"))) != string(cp1File) {
		t.Error("adding x1 changed cp1's file")
	}
	kubeconfig := filepath.Join(l.machine(t, "cp1").Root(), "etc/kubernetes/admin.conf")
	r = runCommand(t, "nsenter", "--net=/run/netns/"+l.Cluster.Hub(), "--", kubebootBin, "config", "fleet", "--cluster", desc, "--out", fleetDir, "--kubeconfig", kubeconfig)
	for _, want := range []string{"worker x1: token " + strings.SplitN(nodeTokens(t, fleetDir)["x1"], ".", 2)[0] + " created in the cluster", "worker w1 has joined"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Fatalf("config fleet --kubeconfig: exit %d, want %q:\n%s%s", r.code, want, r.stdout, r.stderr)
		}
	}
}

// nodeTokens are the workers' node-bound tokens a fleet's directory
// keeps, by node name.
func nodeTokens(t *testing.T, fleetDir string) map[string]string {
	t.Helper()
	tokens := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(readFile(t, filepath.Join(fleetDir, "node-tokens")))), "\n") {
		name, token, _ := strings.Cut(line, " ")
		tokens[name] = token
	}
	return tokens
}

// writeFleet writes a fleet description of nodes (with the cluster and
// worker settings it names) and its files with `kubeboot config fleet`
// into dir/name, and returns that directory.
func writeFleet(t *testing.T, dir, name, body string) string {
	t.Helper()
	desc := filepath.Join(dir, name+".yaml")
	writeFile(t, desc, "apiVersion: kubeboot.io/v1alpha1\nkind: Fleet\n"+body)
	out := filepath.Join(dir, name)
	if r := runCommand(t, kubebootBin, "config", "fleet", "--cluster", desc, "--out", out); r.code != 0 {
		t.Fatalf("config fleet: exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
	return out
}

// serveFleet runs `kubeboot config serve` of dir in the lab's hub, on
// listen, until the test ends, and returns its log.
func serveFleet(t *testing.T, c *lab.Cluster, dir, listen string) *testsupport.SyncBuffer {
	t.Helper()
	log := &testsupport.SyncBuffer{}
	cmd := exec.Command("nsenter", "--net=/run/netns/"+c.Hub(), "--", kubebootBin, "config", "serve", "--dir", dir, "--listen", listen)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return strings.Contains(log.String(), "serving "+dir), nil
	})
	if err != nil {
		t.Fatalf("config serve of %s on %s did not start:\n%s", dir, listen, log.String())
	}
	return log
}

// x1Case gives x1 cmdline as its kernel command line, runs its bootstrap
// unit again and waits for want in its
// journal: at once, the unit failed, when final; else among the retries,
// after which the unit is stopped. Either way x1's disk holds no node
// file and nothing else new in /etc/kubeboot.
func x1Case(t *testing.T, x1 machine.Machine, cmdline, want string, final bool) {
	t.Helper()
	since := inMachine(t, x1, "date", "+@%s")
	writeFile(t, filepath.Join(x1.Root(), lab.CmdlinePath), cmdline+"\n")
	inMachine(t, x1, "systemctl", "restart", "--no-block", "kubeboot-bootstrap")
	waitMachine(t, x1, fmt.Sprintf("%q in x1's journal", want), func(out string) bool { return strings.Contains(out, want) },
		"journalctl", "--no-pager", "-o", "cat", "-u", "kubeboot-bootstrap", "--since", since)
	state := inMachine(t, x1, "sh", "-c", "systemctl is-failed kubeboot-bootstrap || true")
	if final {
		waitMachine(t, x1, "x1's bootstrap unit to fail", func(out string) bool { return out == "failed" }, "sh", "-c", "systemctl is-failed kubeboot-bootstrap || true")
	} else {
		if state == "failed" {
			t.Errorf("x1's bootstrap unit gave up on %q, want retries", want)
		}
		inMachine(t, x1, "systemctl", "stop", "kubeboot-bootstrap")
	}
	entries, err := os.ReadDir(filepath.Join(x1.Root(), "etc/kubeboot"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "cmdline" {
		t.Errorf("after %q, x1's /etc/kubeboot holds %v, want its cmdline alone", want, names)
	}
	if _, err := os.Stat(filepath.Join(x1.Root(), "var/lib/kubelet/config.yaml")); err == nil {
		t.Errorf("after %q, x1's kubelet is configured", want)
	}
}

// checkNodeBound: w1 joined with its node-bound token, whose client
// certificate kubeboot's approver approved; a CSR asked with w9's token for
// another name, and one asked with w1's again once w1 exists, are denied
// and logged.
func checkNodeBound(t *testing.T, cp1 machine.Machine, fleetDir, endpoint string) {
	t.Helper()
	tokens := nodeTokens(t, fleetDir)
	admin := []string{"kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf"}
	w1ID, _, _ := strings.Cut(tokens["w1"], ".")
	got := inMachine(t, cp1, append(admin, "get", "csr", "-o", `jsonpath={range .items[?(@.spec.username=="system:bootstrap:`+w1ID+`")]}{.status.conditions[0].reason} {end}`)...)
	if got != "KubebootNodeBoundJoin" {
		t.Errorf("w1's client CSR, asked with its bound token: %q, want approved as KubebootNodeBoundJoin", got)
	}
	for _, tc := range []struct{ csr, token, cn, reason string }{
		{"bound-stolen", tokens["w9"], "system:node:w7", "BoundTokenOfAnotherNode"},
		{"bound-again", tokens["w1"], "system:node:w1", "BoundNodeJoinedAlready"},
	} {
		writeFile(t, filepath.Join(cp1.Root(), "root", tc.csr+".yaml"), csrManifest(t, tc.csr, tc.cn))
		inMachine(t, cp1, "kubectl", "--kubeconfig", "/dev/null", "--server", "https://"+endpoint, "--certificate-authority", "/etc/kubernetes/pki/ca.crt",
			"--token", tc.token, "create", "-f", "/root/"+tc.csr+".yaml")
		waitMachine(t, cp1, "CSR "+tc.csr+" denied", func(out string) bool { return out == "Denied/"+tc.reason },
			append(admin, "get", "csr", tc.csr, "-o", "jsonpath={.status.conditions[0].type}/{.status.conditions[0].reason}")...)
	}
	waitMachine(t, cp1, "the approver's log of the refusals", func(out string) bool {
		return strings.Contains(out, "denied CSR bound-stolen") && strings.Contains(out, "denied CSR bound-again")
	}, append(admin, "-n", "kube-system", "logs", "kubeboot-csr-approver-cp1")...)
}

// csrManifest is a kubelet's client CSR for cn, as a manifest.
func csrManifest(t *testing.T, name, cn string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: []string{"system:nodes"}}}, key)
	if err != nil {
		t.Fatal(err)
	}
	request := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
	return fmt.Sprintf(`apiVersion: certificates.k8s.io/v1
kind: CertificateSigningRequest
metadata: {name: %s}
spec:
  request: %s
  signerName: kubernetes.io/kube-apiserver-client-kubelet
  usages: [digital signature, client auth]
`, name, request)
}
