//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

// TestControlPlane inits one control-plane machine, whose kubelet is a
// systemd service as on any node, and runs the scenarios that share it as
// subtests, the destructive one last.
func TestControlPlane(t *testing.T) {
	alongside(t)
	n := newNode(t, "cp", "10.89.20.0/24")
	if !t.Run("init under the real kubelet", func(t *testing.T) { testInit(t, n) }) {
		t.Fatal("the control plane did not come up healthy; the scenarios that use it cannot run")
	}
	t.Run("re-run writes nothing and restarts nothing", func(t *testing.T) { testRerun(t, n) })
	t.Run("crictl against the node's containerd", func(t *testing.T) { testCrictl(t, n) })
	t.Run("rejected patch leaves the control plane alone", func(t *testing.T) { testRejectedPatch(t, n) })
	t.Run("component down is diagnosed", func(t *testing.T) { testComponentDown(t, n) })
}

// testInit is scenario 1: init, whose wait phase sees every
// component healthy; then the cluster works as a cluster.
func testInit(t *testing.T, n *node) {
	start := time.Now()
	r := n.up(t)
	events, res, err := parseJSONOutput(r.stdout)
	if err != nil {
		t.Fatalf("init -o json output: %v\nstderr: %s", err, r.stderr)
	}
	if r.code != 0 || !res.OK {
		t.Fatalf("init exited %d (result ok=%v): %s\nstderr: %s", r.code, res.OK, res.Error, r.stderr)
	}
	if !sameSet(res.Healthy, components) {
		t.Fatalf("init reported healthy %v, want %v", res.Healthy, components)
	}
	waitEnd, ok := phaseEnd(events, "wait")
	if !ok {
		t.Fatalf("init printed no event of the wait phase; phases that ran: %v", res.Phases)
	}
	t.Logf("TIMING: init start (once the images are in) -> all %d components healthy (end of the wait phase): %s (init took %s)",
		len(components), waitEnd.Sub(start).Round(time.Millisecond), r.took.Round(time.Millisecond))

	eventually(t, "node "+n.name+" registered and Ready", func() error {
		out, err := n.kubectlErr(t, "get", "node", n.name, "-o", "json")
		if err != nil {
			return err
		}
		var node corev1.Node
		if err := json.Unmarshal([]byte(out), &node); err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("not Ready: %+v", node.Status.Conditions)
	})

	eventually(t, "the four mirror pods Running and Ready", func() error {
		pods, err := n.systemPods(t)
		if err != nil {
			return err
		}
		for _, c := range components {
			if err := mirrorPodReady(pods, c+"-"+n.name); err != nil {
				return err
			}
		}
		return nil
	})
	pods, err := n.systemPods(t)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range components {
		if err := readinessFromManifest(pods[c+"-"+n.name], n.manifestPath(c)); err != nil {
			t.Errorf("%s: %v", c, err)
		}
	}

	n.kubectl(t, "create", "configmap", "e2e-probe", "-n", "default", "--from-literal=greeting=hello")
	if got := n.kubectl(t, "get", "configmap", "e2e-probe", "-n", "default", "-o", "jsonpath={.data.greeting}"); got != "hello" {
		t.Errorf("the ConfigMap read back holds greeting=%q, want hello", got)
	}

	for _, lease := range []string{"kube-controller-manager", "kube-scheduler"} {
		eventually(t, "lease kube-system/"+lease+" held", func() error {
			holder, err := n.kubectlErr(t, "get", "lease", lease, "-n", "kube-system", "-o", "jsonpath={.spec.holderIdentity}")
			if err == nil && holder == "" {
				err = fmt.Errorf("no holderIdentity")
			}
			return err
		})
	}

	if got := strings.TrimSpace(n.kubectl(t, "auth", "can-i", "*", "*")); got != "yes" {
		t.Errorf("kubectl auth can-i '*' '*' with admin.conf says %q, want yes", got)
	}

	var version struct {
		GitVersion string `json:"gitVersion"`
	}
	raw := n.kubectl(t, "get", "--raw", "/version")
	if err := json.Unmarshal([]byte(raw), &version); err != nil || version.GitVersion != kubernetesVersion {
		t.Errorf("/version gitVersion is %q (%v), want %s; body: %s", version.GitVersion, err, kubernetesVersion, raw)
	}
}

// testRerun is scenario 2: init on a finished node writes nothing, and the
// kubelet restarts nothing.
func testRerun(t *testing.T, n *node) {
	before, err := n.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	pids := n.componentPids()
	if len(pids) != len(components) {
		t.Fatalf("component processes before the re-run: %v, want all of %v", pids, components)
	}
	podsBefore := n.podIdentities(t)

	r := n.kubeboot(t, "init", "--config", n.config, "-o", "json")
	_, res, err := parseJSONOutput(r.stdout)
	if err != nil {
		t.Fatalf("init -o json output: %v\nstderr: %s", err, r.stderr)
	}
	if r.code != 0 || !res.OK {
		t.Fatalf("re-run exited %d: %s\nstderr: %s", r.code, res.Error, r.stderr)
	}
	if len(res.Written) != 0 {
		t.Errorf("re-run wrote %v, want nothing", res.Written)
	}
	if len(res.Unchanged) == 0 {
		t.Errorf("re-run reports no unchanged file: it did not check the files it owns")
	}
	if !sameSet(res.Healthy, components) {
		t.Errorf("re-run reported healthy %v, want %v", res.Healthy, components)
	}
	after, err := n.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if diff := snapshotDiff(before, after); len(diff) > 0 {
		t.Errorf("re-run changed files:\n  %s", strings.Join(diff, "\n  "))
	}

	// The kubelet reacts to a manifest change within a second or two, and
	// then replaces the process: watch for a while that it does not.
	consistently(t, 5*time.Second, "component processes after the re-run", func() error {
		if now := n.componentPids(); !maps.Equal(now, pids) {
			return fmt.Errorf("process ids changed from %v to %v", pids, now)
		}
		return nil
	})
	if diff := cmp.Diff(podsBefore, n.podIdentities(t)); diff != "" {
		t.Errorf("mirror pods (uid, restarts) changed after the re-run (-before +after):\n%s", diff)
	}
}

// systemPods returns the kube-system pods by name.
func (n *node) systemPods(t *testing.T) (map[string]corev1.Pod, error) {
	out, err := n.kubectlErr(t, "get", "pods", "-n", "kube-system", "-o", "json")
	if err != nil {
		return nil, err
	}
	var list corev1.PodList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return nil, fmt.Errorf("decode pod list: %w", err)
	}
	pods := map[string]corev1.Pod{}
	for _, p := range list.Items {
		pods[p.Name] = p
	}
	return pods, nil
}

// podIdentities maps each component's mirror pod to its UID and container
// restart counts: both change when the kubelet restarts or recreates it.
func (n *node) podIdentities(t *testing.T) map[string]string {
	t.Helper()
	pods, err := n.systemPods(t)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, c := range components {
		p, ok := pods[c+"-"+n.name]
		if !ok {
			t.Fatalf("no mirror pod %s-%s", c, n.name)
		}
		restarts := 0
		for _, s := range p.Status.ContainerStatuses {
			restarts += int(s.RestartCount)
		}
		ids[p.Name] = fmt.Sprintf("uid %s, %d restarts", p.UID, restarts)
	}
	return ids
}

// mirrorPodReady says why the named pod is not a Running, Ready mirror pod.
func mirrorPodReady(pods map[string]corev1.Pod, name string) error {
	p, ok := pods[name]
	if !ok {
		return fmt.Errorf("no pod %s yet", name)
	}
	if _, mirror := p.Annotations["kubernetes.io/config.mirror"]; !mirror {
		return fmt.Errorf("pod %s is not a mirror pod: annotations %v", name, p.Annotations)
	}
	if p.Status.Phase != corev1.PodRunning {
		return fmt.Errorf("pod %s is %s", name, p.Status.Phase)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return nil
		}
	}
	return fmt.Errorf("pod %s is not Ready: %+v", name, p.Status.Conditions)
}

// readinessFromManifest checks that the mirror pod's readiness probe is the
// one kubeboot rendered into the manifest, so readiness came from it.
func readinessFromManifest(mirror corev1.Pod, manifest string) error {
	rendered, err := readManifest(manifest)
	if err != nil {
		return err
	}
	if len(mirror.Spec.Containers) != 1 {
		return fmt.Errorf("the mirror pod has %d containers, want 1", len(mirror.Spec.Containers))
	}
	want, got := rendered.Spec.Containers[0].ReadinessProbe, mirror.Spec.Containers[0].ReadinessProbe
	if want == nil || want.HTTPGet == nil {
		return fmt.Errorf("%s renders no HTTP readiness probe", manifest)
	}
	if got == nil || got.HTTPGet == nil {
		return fmt.Errorf("the mirror pod has no HTTP readiness probe")
	}
	if diff := cmp.Diff(want.HTTPGet, got.HTTPGet); diff != "" {
		return fmt.Errorf("the mirror pod's readiness probe differs from the manifest's (-manifest +mirror):\n%s", diff)
	}
	return nil
}
