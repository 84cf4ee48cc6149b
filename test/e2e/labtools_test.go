//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/internal/lab"
	"github.com/kubeboot/kubeboot/internal/testsupport"
)

// checkLabLoad: `lab load --nodes w1` puts an archive's image into w1's
// containerd alone, where a pod that may not pull runs it; an archive that
// is no image archive and a node not in the lab are refused, exit 2.
func checkLabLoad(t *testing.T, c *machineCluster) {
	const ref = "example.com/kubeboot-e2e/loaded:1"
	archive := filepath.Join(t.TempDir(), "images.tar")
	err := lab.WriteArchive(archive, []lab.Image{{Ref: ref, Trees: []string{filepath.Join(binDir, "rootfs/busybox")},
		Cmd: []string{"sh", "-c", "echo the loaded image ran; sleep 3600"}}})
	if err != nil {
		t.Fatal(err)
	}
	r := runCommand(t, kubebootBin, "lab", "load", "--cluster", c.desc, "--nodes", "w1", archive)
	if r.code != 0 || !strings.Contains(r.stderr, "w1: "+ref) {
		t.Fatalf("lab load --nodes w1: exit %d: %s", r.code, r.stderr)
	}
	listed := func(node string) bool {
		return strings.Contains(c.exec(t, node, "ctr", "-n", "k8s.io", "images", "ls", "-q"), ref)
	}
	if !listed("w1") || listed("w2") {
		t.Errorf("after lab load --nodes w1: in w1 %v, in w2 %v; want w1 alone", listed("w1"), listed("w2"))
	}
	c.kubectl(t, "run", "loaded", "--image="+ref, "--image-pull-policy=Never", `--overrides={"apiVersion":"v1","spec":{"nodeName":"w1"}}`)
	c.kubectl(t, "wait", "--for=condition=Ready", "pod/loaded", "--timeout=60s")
	if out := c.kubectl(t, "logs", "loaded"); !strings.Contains(out, "the loaded image ran") {
		t.Errorf("the loaded image's pod logged %q", out)
	}

	notArchive := filepath.Join(t.TempDir(), "notes.tar")
	if err := os.WriteFile(notArchive, make([]byte, 2048), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{notArchive}, {"--nodes", "w9", archive}} {
		r := runCommand(t, kubebootBin, append([]string{"lab", "load", "--cluster", c.desc}, args...)...)
		if r.code != 2 || (!strings.Contains(r.stderr, notArchive) && !strings.Contains(r.stderr, `no node "w9"`)) {
			t.Errorf("lab load %v: exit %d: %s", args, r.code, r.stderr)
		}
	}
}

// checkLabExportLogs: `lab export logs DIR` writes one archive there with
// every node's journals, the kubelet's apart, the pods' logs and the
// cluster's dumps, and nothing it could not collect.
func checkLabExportLogs(t *testing.T, c *machineCluster) {
	dir := t.TempDir()
	r := runCommand(t, kubebootBin, "lab", "export", "logs", "--cluster", c.desc, dir)
	path := strings.TrimSpace(r.stdout)
	if r.code != 0 || filepath.Dir(path) != dir || !strings.HasSuffix(path, ".tar.gz") {
		t.Fatalf("lab export logs: exit %d, stdout %q: %s", r.code, r.stdout, r.stderr)
	}
	// The archive's names start with its base directory.
	files := map[string]string{}
	for name, data := range testsupport.ReadTarGz(t, path) {
		files[name[strings.Index(name, "/")+1:]] = data
	}
	for name, want := range map[string]string{
		"cp1/kubelet.log":           "kubelet",
		"w1/containerd.log":         "containerd",
		"w2/journal.log":            "systemd",
		"w1/kubeboot-bootstrap.log": "kubelet-start",
		"cluster/pods.txt":          "coredns",
		"cluster/nodes.txt":         "w2",
		"cluster/events.txt":        "loaded",
	} {
		if !strings.Contains(files[name], want) {
			t.Errorf("%s in the archive holds no %q (%d bytes)", name, want, len(files[name]))
		}
	}
	found := false
	for name, data := range files {
		if strings.HasPrefix(name, "w1/var/log/pods/default_loaded_") && strings.Contains(data, "the loaded image ran") {
			found = true
		}
		if strings.HasSuffix(name, "errors.txt") {
			t.Errorf("%s: %s", name, data)
		}
	}
	if !found {
		t.Error("the archive holds no log of w1's pod loaded")
	}
}

// appManifest is a workload as a lab's user writes one: a Deployment of
// the lab's agnhost with a claim of the default StorageClass mounted, and a
// Service in front of it.
const appManifest = `apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 10Mi}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: app}
spec:
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      containers:
      - name: app
        image: ` + lab.AgnhostImage + `
        args: [netexec, --http-port=8080]
        volumeMounts: [{name: data, mountPath: /data}]
      volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
---
apiVersion: v1
kind: Service
metadata: {name: app}
spec: {selector: {app: app}, ports: [{port: 80, targetPort: 8080}]}
`

// checkWorkloadWithVolume: on the lab as `lab up` left it, with no other
// step, appManifest works: the claim binds through the default
// StorageClass, the pod answers through its Service's DNS name, and what
// it wrote to its volume is there for the pod that replaces it.
func checkWorkloadWithVolume(t *testing.T, c *machineCluster) {
	manifest := filepath.Join(t.TempDir(), "app.yaml")
	if err := os.WriteFile(manifest, []byte(appManifest), 0o600); err != nil {
		t.Fatal(err)
	}
	c.kubectl(t, "apply", "-f", manifest)
	c.kubectl(t, "rollout", "status", "deployment/app", "--timeout=3m")
	if phase := c.kubectl(t, "get", "pvc", "data", "-o", "jsonpath={.status.phase}"); phase != "Bound" {
		t.Fatalf("the claim is %q, want Bound", phase)
	}
	pod := strings.TrimPrefix(strings.TrimSpace(c.kubectl(t, "get", "pods", "-l", "app=app", "-o", "name")), "pod/")
	if out := c.kubectl(t, "exec", "deploy/app", "--", "curl", "-sS", "--max-time", "10", "http://app.default.svc.cluster.local/hostname"); strings.TrimSpace(out) != pod {
		t.Errorf("the Service by its DNS name answered %q, want the pod's name %q", out, pod)
	}
	c.kubectl(t, "exec", "deploy/app", "--", "sh", "-c", "echo kept > /data/note")
	c.kubectl(t, "delete", "pod", pod, "--wait=true")
	c.kubectl(t, "rollout", "status", "deployment/app", "--timeout=3m")
	if out := c.kubectl(t, "exec", "deploy/app", "--", "cat", "/data/note"); strings.TrimSpace(out) != "kept" {
		t.Errorf("the volume as the next pod sees it: %q, want what the first wrote", out)
	}
}

// TestTwoLabs: two labs run side by side without interfering: both come
// up at once, `lab list` shows each (nodes, endpoint), each one's
// kubeconfig reaches its own cluster; a third lab that would reuse a
// name or a subnet of theirs is refused (exit 2) with nothing set up; one
// brought down leaves the other working, and `lab list` empty at the
// end, and neither /run/netns nor /run/systemd where the host had none.
func TestTwoLabs(t *testing.T) {
	sharedBefore := existing(sharedRunDirs.paths)
	a := startMachineCluster(t, "twoa", "10.89.31.0/24", "10.251.0.0/16", "\n- {name: a1, role: control-plane}\n")
	b := startMachineCluster(t, "twob", "10.89.32.0/24", "10.252.0.0/16", "\n- {name: b1, role: control-plane}\n")
	results := make(chan string, 2)
	for _, c := range []*machineCluster{a, b} {
		go func() {
			r := runCommand(t, kubebootBin, "lab", "up", "--cluster", c.desc, "--bin-dir", binDir, "--package", kubebootDeb)
			if r.code != 0 {
				results <- fmt.Sprintf("lab up %s exited %d:\n%s", c.name, r.code, testsupport.LastLines(r.stderr, 30))
				return
			}
			results <- ""
		}()
	}
	for range 2 {
		if msg := <-results; msg != "" {
			t.Fatal(msg)
		}
	}
	var listed struct {
		Result []lab.Entry `json:"result"`
	}
	r := runCommand(t, kubebootBin, "lab", "list", "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil || len(listed.Result) != 2 {
		t.Fatalf("lab list -o json: exit %d, %v: %s", r.code, err, r.stdout)
	}
	for i, want := range []struct{ name, node string }{{"twoa", "a1"}, {"twob", "b1"}} {
		if e := listed.Result[i]; e.Name != want.name || !slices.Equal(e.Nodes, []string{want.node}) || e.Endpoint == "" {
			t.Errorf("lab list's %d: %+v, want %s with node %s and its endpoint", i, e, want.name, want.node)
		}
	}
	if r := runCommand(t, kubebootBin, "lab", "list"); !strings.Contains(r.stdout, "twoa") || !strings.Contains(r.stdout, "twob") {
		t.Errorf("lab list: %s", r.stdout)
	}
	for _, c := range []*machineCluster{a, b} {
		if nodes := c.kubectl(t, "get", "nodes", "-o", "name"); strings.TrimSpace(nodes) != "node/"+c.lab.Cluster.Nodes[0].Name {
			t.Errorf("lab %s's kubeconfig lists %q", c.name, nodes)
		}
	}

	for field, desc := range map[string]string{
		"name":   "name: twoa\ndir: " + filepath.Join(t.TempDir(), "c") + "\nsubnet: 10.89.33.0/24\npodSubnet: 10.253.0.0/16\n",
		"subnet": "name: twoc\ndir: " + filepath.Join(t.TempDir(), "c") + "\nsubnet: 10.89.32.0/24\npodSubnet: 10.253.0.0/16\n",
	} {
		path := filepath.Join(t.TempDir(), "third.yaml")
		writeFile(t, path, "apiVersion: kubeboot.io/v1alpha1\nkind: LabCluster\n"+desc+"nodes: [{name: c1, role: control-plane}]\n")
		before := hostNetworkState(t, "")
		r := runCommand(t, kubebootBin, "lab", "up", "--cluster", path, "--bin-dir", binDir, "--package", kubebootDeb)
		if r.code != 2 || !strings.Contains(r.stderr, field+": ") || !strings.Contains(r.stderr, "collides with lab") {
			t.Errorf("a third lab reusing a %s: exit %d: %s", field, r.code, r.stderr)
		}
		if after := hostNetworkState(t, ""); !slices.Equal(before.namespaces, after.namespaces) {
			t.Errorf("the refused lab set up namespaces: %v", after.namespaces)
		}
	}

	if r := runCommand(t, kubebootBin, "lab", "down", "--cluster", a.desc); r.code != 0 {
		t.Fatalf("lab down %s: %s", a.name, r.stderr)
	}
	if nodes := b.kubectl(t, "get", "nodes", "-o", "name"); strings.TrimSpace(nodes) != "node/b1" {
		t.Errorf("after lab a came down, lab b lists %q", nodes)
	}
	if r := runCommand(t, kubebootBin, "lab", "list", "-o", "json"); !strings.Contains(r.stdout, "twob") || strings.Contains(r.stdout, "twoa") {
		t.Errorf("lab list after lab a came down: %s", r.stdout)
	}
	if r := runCommand(t, kubebootBin, "lab", "down", "--cluster", b.desc); r.code != 0 {
		t.Fatalf("lab down %s: %s", b.name, r.stderr)
	}
	if _, err := os.Stat(lab.DefaultRegistry); !os.IsNotExist(err) {
		t.Errorf("after both labs came down, %s is still there (%v)", lab.DefaultRegistry, err)
	}
	// The lab that made /run/netns or /run/systemd came down first, and
	// handed their removal to the other.
	if after := existing(sharedRunDirs.paths); !slices.Equal(sharedBefore, after) {
		t.Errorf("after both labs came down, of %v the host has %v, and had %v before", sharedRunDirs.paths, after, sharedBefore)
	}
}

// existing lists which of paths exist.
func existing(paths []string) []string {
	var found []string
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			found = append(found, p)
		}
	}
	return found
}
