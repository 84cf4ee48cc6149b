//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/bootstrap"
)

// The pins of CoreDNS that kubeadm v1.35 and v1.36 use.
const (
	coreDNSv135 = "registry.k8s.io/coredns/coredns:v1.13.1"
	coreDNSv136 = "registry.k8s.io/coredns/coredns:v1.14.2"
)

// addonObjects are the addon objects, as kubectl names them.
var addonObjects = []string{
	"serviceaccount/coredns", "configmap/coredns", "deployment/coredns", "service/kube-dns",
	"clusterrole/system:coredns", "clusterrolebinding/system:coredns",
	"serviceaccount/kube-proxy", "configmap/kube-proxy", "daemonset/kube-proxy",
	"role/kube-proxy", "rolebinding/kube-proxy", "clusterrolebinding/kubeadm:node-proxier",
}

// TestAddons brings up a v1.35 lab of three machines, one control-plane
// node and two kubeboot workers, and checks that its pods get DNS and Services from the
// addons init installs: CoreDNS Ready on both pods; a pod on w1 resolves
// the API's and a Service's names and reaches the Service's two backends on
// w2 through its ClusterIP; a NodePort answers from outside the nodes on a
// node's address; DNS survives the loss of a CoreDNS pod; the Service
// follows its Deployment through 2 -> 0 -> 2; init run again changes no
// addon object; diff shows drift (both run in cp1 with lab exec). Then it
// upgrades the control plane to v1.36 while probing the Service, and checks that the addons moved to the new
// pins and reports the Service's longest gap. Last, etcd is destroyed and
// restored from a snapshot while the Service is probed (restore_test.go).
func TestAddons(t *testing.T) {
	alongside(t)
	// The LabCluster's kubernetesVersion, after the node list.
	c := startMachineCluster(t, "e2ea", "10.89.9.0/24", "10.247.0.0/16", `
- name: cp1
  role: control-plane
- name: w1
  role: worker
- name: w2
  role: worker
kubernetesVersion: v1.35.4
`)
	r := runCommand(t, kubebootBin, "lab", "up", "--cluster", c.desc, "--bin-dir", binDir, "--package", kubebootDeb)
	if r.code != 0 {
		t.Fatalf("lab up --cluster exited %d:\n%s", r.code, r.stderr)
	}
	t.Logf("TIMING: lab up --cluster (one control plane, two workers, addons rolled out): %s", r.took.Round(time.Millisecond))
	nodes := c.readyNodes(t, 3)

	c.checkAddonImages(t, coreDNSv135, "registry.k8s.io/kube-proxy:v1.35.4")
	c.checkCoreDNSReady(t)
	if got := c.kubectl(t, "-n", "kube-system", "get", "service", "kube-dns", "-o", "jsonpath={.spec.clusterIP}"); got != "10.96.0.10" {
		t.Errorf("kube-dns has cluster IP %q, want 10.96.0.10, the kubelets' clusterDNS", got)
	}

	c.runBackends(t, "w2")
	c.kubectl(t, "run", "client", "--image", agnhostImage, "--image-pull-policy", "Never",
		"--overrides", `{"spec":{"nodeName":"w1"}}`, "--", "netexec", "--http-port=8080")
	c.kubectl(t, "wait", "--for=condition=Ready", "pod/client", "--timeout=120s")
	for _, name := range []string{"kubernetes.default.svc.cluster.local:443", "web.default.svc.cluster.local:80"} {
		c.resolveAndConnect(t, name)
	}
	backends := c.backendNames(t)
	if got := c.dialService(t); !slices.Equal(got, backends) {
		t.Errorf("the ClusterIP of web, from a pod on w1, was answered by %v, want both backends %v", got, backends)
	}
	c.checkNodePort(t, internalIP(nodes["w1"]), backends)

	// Delete a CoreDNS pod: the other one answers at once.
	pods := c.kubectl(t, "-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-dns", "-o", "jsonpath={.items[0].metadata.name}")
	c.kubectl(t, "-n", "kube-system", "delete", "pod", pods, "--wait=false")
	for range 5 {
		c.resolveAndConnect(t, "web.default.svc.cluster.local:80")
	}
	c.checkCoreDNSReady(t)

	// Restart w1's kube-proxy: the new one reads its rules back and keeps
	// them (a kube-proxy that cannot name protocols took its own for stale
	// ones and left the node with no Services).
	proxy := c.kubectl(t, "-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-proxy", "--field-selector=spec.nodeName=w1", "-o", "jsonpath={.items[0].metadata.name}")
	c.kubectl(t, "-n", "kube-system", "delete", "pod", proxy)
	c.kubectl(t, "-n", "kube-system", "rollout", "status", "daemonset/kube-proxy", "--timeout=120s")
	c.eventuallyResolves(t, "after its kube-proxy's restart")

	// Scale 2 -> 0 -> 2: the Service follows.
	c.kubectl(t, "scale", "deployment/web", "--replicas=0")
	eventually(t, "web has no endpoints once scaled to 0", func() error {
		if got := c.dialServiceOnce(t); len(got) > 0 {
			return fmt.Errorf("answered by %v", got)
		}
		return nil
	})
	c.kubectl(t, "scale", "deployment/web", "--replicas=2")
	c.kubectl(t, "rollout", "status", "deployment/web", "--timeout=120s")
	backends = c.backendNames(t)
	if got := c.dialService(t); !slices.Equal(got, backends) {
		t.Errorf("after 2 -> 0 -> 2 the ClusterIP of web was answered by %v, want the new backends %v", got, backends)
	}

	c.checkInitChangesNoAddon(t)
	c.checkAddonDiff(t)
	t.Run("user manifests", c.checkUserManifests)
	c.upgradeWhileProbing(t)
	t.Run("user manifests after the upgrade", c.checkUserManifestsReapplied)
	c.restoreWhileProbing(t)
}

// checkAddonImages wants the CoreDNS Deployment and the kube-proxy
// DaemonSet at these images, and every pod of theirs running them.
func (c *labCluster) checkAddonImages(t *testing.T, coreDNS, kubeProxy string) {
	t.Helper()
	for what, want := range map[string]string{"deployment/coredns": coreDNS, "daemonset/kube-proxy": kubeProxy} {
		if got := c.kubectl(t, "-n", "kube-system", "get", what, "-o", "jsonpath={.spec.template.spec.containers[0].image}"); got != want {
			t.Errorf("%s runs %s, want %s", what, got, want)
		}
	}
	for selector, want := range map[string]string{"k8s-app=kube-dns": coreDNS, "k8s-app=kube-proxy": kubeProxy} {
		var list corev1.PodList
		if err := c.kubectlJSON(t, &list, "-n", "kube-system", "get", "pods", "-l", selector); err != nil {
			t.Fatal(err)
		}
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && p.Spec.Containers[0].Image != want {
				t.Errorf("pod %s runs %s, want %s", p.Name, p.Spec.Containers[0].Image, want)
			}
		}
	}
}

// checkCoreDNSReady waits for two Ready CoreDNS pods.
func (c *labCluster) checkCoreDNSReady(t *testing.T) {
	t.Helper()
	eventually(t, "two CoreDNS pods Ready", func() error {
		var list corev1.PodList
		if err := c.kubectlJSON(t, &list, "-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-dns"); err != nil {
			return err
		}
		ready := 0
		for _, p := range list.Items {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
					ready++
				}
			}
		}
		if ready != 2 {
			return fmt.Errorf("%d of %d CoreDNS pods Ready", ready, len(list.Items))
		}
		return nil
	})
}

// runBackends runs Deployment web, two agnhost netexec pods on node that
// answer /hostname with their pod's name, behind ClusterIP Service web
// (port 80) and NodePort Service web-np.
func (c *labCluster) runBackends(t *testing.T, node string) {
	t.Helper()
	manifest := filepath.Join(c.root, "web.yaml")
	if err := os.WriteFile(manifest, []byte(fmt.Sprintf(webManifest, agnhostImage, node)), 0o600); err != nil {
		t.Fatal(err)
	}
	c.kubectl(t, "apply", "-f", manifest)
	c.kubectl(t, "rollout", "status", "deployment/web", "--timeout=120s")
}

// webManifest is runBackends' Deployment (image and node to fill in) and
// Services.
const webManifest = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      nodeSelector: {kubernetes.io/hostname: %[2]s}
      containers:
      - {name: web, image: %[1]q, imagePullPolicy: Never, args: [netexec, --http-port=8080]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: web-np, namespace: default}
spec:
  type: NodePort
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
`

// backendNames are the names of web's running pods, sorted.
func (c *labCluster) backendNames(t *testing.T) []string {
	t.Helper()
	var list corev1.PodList
	if err := c.kubectlJSON(t, &list, "get", "pods", "-l", "app=web", "--field-selector=status.phase=Running"); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			names = append(names, p.Name)
		}
	}
	slices.Sort(names)
	return names
}

// resolveAndConnect resolves name (host:port) in the client pod on w1,
// through its resolv.conf (CoreDNS), and connects to it.
func (c *labCluster) resolveAndConnect(t *testing.T, name string) {
	t.Helper()
	if out, err := c.kubectlErr(t, "exec", "client", "--", "/agnhost", "connect", "--timeout=5s", name); err != nil {
		t.Errorf("the pod on w1 cannot resolve and connect to %s: %v: %s", name, err, out)
	}
}

// dialService asks the client pod on w1 to get /hostname from the web
// Service by its name, 20 times, until both backends have answered, and
// returns who answered, sorted and without repeats.
func (c *labCluster) dialService(t *testing.T) []string {
	t.Helper()
	var got []string
	eventually(t, "both backends answer the Service's ClusterIP", func() error {
		got = c.dialServiceOnce(t)
		if len(got) < 2 {
			return fmt.Errorf("answered by %v", got)
		}
		return nil
	})
	return got
}

func (c *labCluster) dialServiceOnce(t *testing.T) []string {
	t.Helper()
	body := c.portForwardGet(t, "client", "/dial?request=hostname&protocol=http&host=web.default.svc.cluster.local&port=80&tries=20")
	var reply struct {
		Responses []string `json:"responses"`
	}
	if err := json.Unmarshal([]byte(body), &reply); err != nil {
		t.Fatalf("netexec /dial replied %q: %v", body, err)
	}
	slices.Sort(reply.Responses)
	return slices.Compact(reply.Responses)
}

// checkNodePort gets /hostname from web-np's node port on a node with no
// backend, from the lab's hub: outside every node, as a client on the
// nodes' network would.
func (c *labCluster) checkNodePort(t *testing.T, nodeIP string, backends []string) {
	t.Helper()
	port := c.kubectl(t, "get", "service", "web-np", "-o", "jsonpath={.spec.ports[0].nodePort}")
	url := fmt.Sprintf("http://%s:%s/hostname", nodeIP, port)
	r := runCommand(t, "nsenter", "--net=/run/netns/kb-"+c.name, "--", "curl", "-sS", "--max-time", "5", url)
	if r.code != 0 || !slices.Contains(backends, strings.TrimSpace(r.stdout)) {
		t.Errorf("NodePort %s answered %q (exit %d, %s), want a backend's name among %v", url, r.stdout, r.code, r.stderr, backends)
	}
}

// kubebootWrites says, of each addon object, what changes when kubeboot
// changes it: of an object with a generation (a Deployment, a DaemonSet)
// that generation, a spec's change, and when kubeboot last changed its
// fields (its managed fields' time), since the controllers write its
// status whenever its pods change; of any other, its resourceVersion.
func (c *labCluster) kubebootWrites(t *testing.T) map[string]string {
	t.Helper()
	writes := map[string]string{}
	for _, obj := range addonObjects {
		out := c.kubectl(t, "-n", "kube-system", "get", obj, "-o", `jsonpath={.metadata.resourceVersion} {.metadata.generation} {.metadata.managedFields[?(@.manager=="kubeboot")].time}`)
		version, written, _ := strings.Cut(out, " ")
		if strings.TrimSpace(written) == "" {
			written = "resourceVersion " + version
		}
		writes[obj] = written
	}
	return writes
}

// kubebootOnCP1 is `kubeboot lab exec` of kubeboot with args on cp1.
func (c *machineCluster) kubebootOnCP1(args ...string) *exec.Cmd {
	return exec.Command(kubebootBin, append([]string{"lab", "exec", "--cluster", c.desc, "cp1", "--", "kubeboot"}, args...)...)
}

// checkInitChangesNoAddon runs init again on cp1 and wants no addon
// object changed by it (kubebootWrites).
func (c *machineCluster) checkInitChangesNoAddon(t *testing.T) {
	t.Helper()
	before := c.kubebootWrites(t)
	r := runCommand(t, kubebootBin, "lab", "exec", "--cluster", c.desc, "cp1", "--", "kubeboot", "init", "--config", bootstrap.ConfigPath)
	if r.code != 0 {
		t.Fatalf("init re-run exited %d:\n%s", r.code, r.stderr)
	}
	for _, obj := range []string{"Deployment kube-system/coredns unchanged", "DaemonSet kube-system/kube-proxy unchanged"} {
		if !strings.Contains(r.stderr, obj) {
			t.Errorf("the init re-run does not say %q:\n%s", obj, r.stderr)
		}
	}
	after := c.kubebootWrites(t)
	for obj, v := range before {
		if after[obj] != v {
			t.Errorf("init re-run changed %s: generation and kubeboot's last write %q -> %q", obj, v, after[obj])
		}
	}
}

// checkAddonDiff wants diff to show no addon drift, then, after a change
// to CoreDNS's Corefile, the ConfigMap's drift and exit 1.
func (c *machineCluster) checkAddonDiff(t *testing.T) {
	t.Helper()
	diff := []string{"lab", "exec", "--cluster", c.desc, "cp1", "--", "kubeboot", "diff", "--config", bootstrap.ConfigPath}
	if r := runCommand(t, kubebootBin, diff...); r.code != 0 {
		t.Fatalf("diff on a converged cluster exited %d:\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	c.kubectl(t, "-n", "kube-system", "patch", "configmap", "coredns", "--type=merge", "-p", `{"data":{"Corefile":".:53 {\n    errors\n}\n"}}`)
	r := runCommand(t, kubebootBin, diff...)
	restored := slices.ContainsFunc(strings.Split(r.stdout, "\n"), func(line string) bool {
		return strings.HasPrefix(line, "+") && strings.Contains(line, "kubernetes cluster.local")
	})
	if r.code != 1 || !strings.Contains(r.stdout, "ConfigMap kube-system/coredns (wanted)") || !restored {
		t.Errorf("diff after a change to the Corefile exited %d, want 1 and the ConfigMap's diff:\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// upgradeWhileProbing moves cp1's file to v1.36.3 and runs upgrade apply
// there while getting /hostname from the web Service's ClusterIP on w1
// every 100 ms, and wants the addons at the new pins, rolled out, and the
// Service answering throughout: its longest gap is reported.
func (c *machineCluster) upgradeWhileProbing(t *testing.T) {
	t.Helper()
	path := filepath.Join(c.machine(t, "cp1").Root(), bootstrap.ConfigPath)
	writeFile(t, path, strings.Replace(string(readFile(t, path)), "kubernetesVersion: v1.35.4\n", "kubernetesVersion: v1.36.3\n", 1))
	clusterIP := c.kubectl(t, "get", "service", "web", "-o", "jsonpath={.spec.clusterIP}")
	probe := newServiceProbe("/run/netns/kb-"+c.name+"-w1", "http://"+clusterIP+"/hostname")
	start := time.Now()
	stderr, err := timedLines(c.kubebootOnCP1("upgrade", "apply", "--config", bootstrap.ConfigPath))
	took := time.Since(start)
	probes, failures, gap := probe.stop()
	if err != nil {
		t.Fatalf("upgrade apply: %v:\n%s", err, stderr)
	}
	t.Logf("TIMING: upgrade apply v1.35.4 -> v1.36.3 with addons: %s; the Service answered %d of %d probes, longest gap %s",
		took.Round(time.Millisecond), probes-failures, probes, gap.Round(time.Millisecond))
	if gap > 0 {
		t.Logf("the longest gap ended %s into the upgrade; its last probe: %s; the upgrade's progress:\n%s",
			probe.gapEnd.Sub(start).Round(time.Millisecond), probe.gapReason, stderr)
	}
	if !strings.Contains(stderr, "addons rolled out") {
		t.Errorf("upgrade apply did not verify the addons' rollout:\n%s", stderr)
	}
	// A generous bound: kube-proxy's rules stay in the kernel while its pod
	// restarts, so the expected gap is one probe or none.
	if probes < 10 || gap > 30*time.Second {
		t.Errorf("the Service's longest gap during the upgrade was %s over %d probes", gap, probes)
	}
	c.checkAddonImages(t, coreDNSv136, "registry.k8s.io/kube-proxy:v1.36.3")
	var ds appsv1.DaemonSet
	if err := c.kubectlJSON(t, &ds, "-n", "kube-system", "get", "daemonset", "kube-proxy"); err != nil {
		t.Fatal(err)
	}
	if ds.Status.UpdatedNumberScheduled != 3 || ds.Status.NumberAvailable != 3 {
		t.Errorf("kube-proxy after the upgrade: %d updated, %d available, want 3 of each", ds.Status.UpdatedNumberScheduled, ds.Status.NumberAvailable)
	}
	c.checkCoreDNSReady(t)
	// The new CoreDNS pods' endpoints reach every kube-proxy within its
	// sync period.
	c.eventuallyResolves(t, "after the upgrade")
}

// eventuallyResolves waits until the client pod on w1 resolves the web
// Service's name and connects to it: a node's rules lag a change by up to
// kube-proxy's sync period, and a kube-proxy that lost them stays so.
func (c *labCluster) eventuallyResolves(t *testing.T, when string) {
	t.Helper()
	eventually(t, "the pod on w1 resolves web "+when, func() error {
		if out, err := c.kubectlErr(t, "exec", "client", "--", "/agnhost", "connect", "--timeout=5s", "web.default.svc.cluster.local:80"); err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	})
}

// timedLines runs cmd and returns its stderr, each line prefixed with the
// time since the start, and whether it succeeded.
func timedLines(cmd *exec.Cmd) (string, error) {
	pipe, err := cmd.StderrPipe()
	if err != nil {
		return "", err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return "", err
	}
	var b strings.Builder
	lines := bufio.NewScanner(pipe)
	for lines.Scan() {
		fmt.Fprintf(&b, "%6.1fs %s\n", time.Since(start).Seconds(), lines.Text())
	}
	return b.String(), cmd.Wait()
}

// serviceProbe gets a URL from inside a network namespace, again and
// again, until stopped, and measures the longest time without an answer.
type serviceProbe struct {
	done chan struct{}
	wg   sync.WaitGroup

	probes, failures int
	gap              time.Duration
	// gapEnd is when the longest gap ended, and why its last probe failed.
	gapEnd    time.Time
	gapReason string
	// failed are the first failures, each with its time.
	failed []string
}

func newServiceProbe(netns, url string) *serviceProbe {
	p := &serviceProbe{done: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		lastAnswer := time.Now()
		for {
			select {
			case <-p.done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			p.probes++
			out, err := exec.Command("nsenter", "--net="+netns, "--", "curl", "-sS", "--max-time", "1", url).CombinedOutput()
			if err != nil || !strings.HasPrefix(string(out), "web-") {
				if p.failures < 400 {
					p.failed = append(p.failed, time.Now().UTC().Format("15:04:05.0")+" "+strings.TrimSpace(string(out)))
				}
				p.failures++
				if gap := time.Since(lastAnswer); gap > p.gap {
					p.gap, p.gapEnd, p.gapReason = gap, time.Now(), strings.TrimSpace(string(out))
				}
				continue
			}
			lastAnswer = time.Now()
		}
	}()
	return p
}

// stop ends the probing and returns the probes made, the failed ones and
// the longest time without an answer.
func (p *serviceProbe) stop() (probes, failures int, gap time.Duration) {
	close(p.done)
	p.wg.Wait()
	return p.probes, p.failures, p.gap
}

// userManifest is a file of addons.manifests on cp1: a Namespace, a
// CustomResourceDefinition and an object of its kind, and a ConfigMap,
// each after what it needs only in the apply's order, not the file's. The
// Namespace sets a label: one that sets nothing but its name leaves its
// applier no field, and the API server writes it once more at the first
// re-apply, to record its managed fields (seen on v1.35.4 and v1.36.3).
const userManifest = `apiVersion: e2e.kubeboot.io/v1
kind: Widget
metadata: {name: w1, namespace: e2e-demo}
spec: {size: 3}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: e2e-demo}
data: {level: info}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.e2e.kubeboot.io}
spec:
  group: e2e.kubeboot.io
  scope: Namespaced
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
---
apiVersion: v1
kind: Namespace
metadata: {name: e2e-demo, labels: {team: e2e}}
`

// userManifestsDir is the directory of cp1's addons.manifests.
const userManifestsDir = "/etc/kubeboot/manifests"

// checkUserManifests gives cp1's configuration addons.manifests and wants
// init's addon/manifests phase to apply every object by server-side apply
// as kubeboot (the CustomResourceDefinition established before its
// Widget), a re-run to change nothing, diff to show a changed field, and a
// manifest in a namespace that does not exist refused, exit 2, naming the
// file and the object, with nothing applied.
func (c *machineCluster) checkUserManifests(t *testing.T) {
	root := c.machine(t, "cp1").Root()
	writeFile(t, filepath.Join(root, userManifestsDir, "10-demo.yaml"), userManifest)
	c.setUserManifests(t, root)
	phase := []string{"lab", "exec", "--cluster", c.desc, "cp1", "--", "kubeboot", "init", "phase", "addon", "manifests", "--config", bootstrap.ConfigPath}
	r := runCommand(t, kubebootBin, phase...)
	if r.code != 0 || !strings.Contains(r.stderr, "Widget e2e-demo/w1 created") || !strings.Contains(r.stderr, "1 CustomResourceDefinition(s) established") {
		t.Fatalf("addon/manifests exited %d:\n%s", r.code, r.stderr)
	}
	if got := c.kubectl(t, "-n", "e2e-demo", "get", "widget", "w1", "-o", "jsonpath={.spec.size}"); got != "3" {
		t.Errorf("Widget w1 has size %q, want 3", got)
	}
	managers := c.kubectl(t, "-n", "e2e-demo", "get", "configmap", "settings", "--show-managed-fields", "-o", "jsonpath={.metadata.managedFields[*].manager}/{.metadata.managedFields[*].operation}")
	if managers != "kubeboot/Apply" {
		t.Errorf("ConfigMap settings is managed by %q, want kubeboot/Apply", managers)
	}
	if r := runCommand(t, kubebootBin, phase...); r.code != 0 || strings.Count(r.stderr, " unchanged") != 4 {
		t.Errorf("the re-run exited %d, want every object unchanged:\n%s", r.code, r.stderr)
	}

	c.kubectl(t, "-n", "e2e-demo", "patch", "configmap", "settings", "--type=merge", "-p", `{"data":{"level":"debug"}}`)
	diff := runCommand(t, kubebootBin, "lab", "exec", "--cluster", c.desc, "cp1", "--", "kubeboot", "diff", "--config", bootstrap.ConfigPath)
	if diff.code != 1 || !strings.Contains(diff.stdout, "ConfigMap e2e-demo/settings (wanted)") || !strings.Contains(diff.stdout, "+  level: info") {
		t.Errorf("diff after a change to the ConfigMap exited %d, want 1 and its diff:\n%s\n%s", diff.code, diff.stdout, diff.stderr)
	}

	bad := filepath.Join(userManifestsDir, "20-bad.yaml")
	writeFile(t, filepath.Join(root, bad), "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: lost, namespace: nowhere}\n")
	r = runCommand(t, kubebootBin, phase...)
	want := bad + `, document 1 (ConfigMap nowhere/lost): namespace "nowhere" does not exist`
	if r.code != 2 || !strings.Contains(r.stderr, want) || strings.Contains(r.stderr, "ConfigMap e2e-demo/settings updated") {
		t.Errorf("a manifest in a missing namespace: exit %d, want 2 saying %q and applying nothing:\n%s", r.code, want, r.stderr)
	}
	if err := os.Remove(filepath.Join(root, bad)); err != nil {
		t.Fatal(err)
	}
}

// setUserManifests adds userManifestsDir to addons.manifests in cp1's
// configuration, under root.
func (c *machineCluster) setUserManifests(t *testing.T, root string) {
	t.Helper()
	path := filepath.Join(root, bootstrap.ConfigPath)
	var doc map[string]any
	if err := yaml.Unmarshal(readFile(t, path), &doc); err != nil {
		t.Fatal(err)
	}
	addons, _ := doc["addons"].(map[string]any)
	if addons == nil {
		addons = map[string]any{}
	}
	addons["manifests"] = []string{userManifestsDir}
	doc["addons"] = addons
	data, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, string(data))
}

// checkUserManifestsReapplied wants upgrade apply to have applied the
// user's manifests again: the ConfigMap changed by hand is as its manifest
// says.
func (c *machineCluster) checkUserManifestsReapplied(t *testing.T) {
	if got := c.kubectl(t, "-n", "e2e-demo", "get", "configmap", "settings", "-o", "jsonpath={.data.level}"); got != "info" {
		t.Errorf("after upgrade apply ConfigMap e2e-demo/settings has level %q, want info", got)
	}
}
