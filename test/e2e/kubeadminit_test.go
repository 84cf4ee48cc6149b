//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestKubeadmInit brings up a lab whose one node the real `kubeadm init`
// v1.36.3 inits (`init: kubeadm`), the other side of make bench's
// comparison: kubeadm's control plane comes up under the lab's kubelet and
// containerd, kubeadm made the cluster (its kubeadm-config, no kube-proxy),
// the node's bring-up is staged as a kubeboot node's is, the node's own
// /etc/hosts names it while the host's is untouched, and lab down leaves
// nothing behind.
func TestKubeadmInit(t *testing.T) {
	hosts, err := os.ReadFile("/etc/hosts")
	if err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, "e2ek", "10.89.10.0/24", "10.248.0.0/16", "\n- name: cp1\n  role: control-plane\n  init: kubeadm\n")
	r := runCommand(t, kubebootBin, "lab", "up", "--cluster", c.desc, "--bin-dir", binDir, "-o", "json")
	if r.code != 0 {
		t.Fatalf("lab up --cluster exited %d:\n%s\n%s", r.code, r.stderr, tailString(r.stdout, 30))
	}
	t.Logf("TIMING: lab up --cluster of one node that kubeadm inits: %s", r.took.Round(time.Millisecond))

	// The kubelet posts the static pods' mirror pods once its Node exists,
	// which may be after kubeadm init returned.
	eventually(t, "the four components' mirror pods Running in kube-system", func() error {
		var pods corev1.PodList
		if err := c.kubectlJSON(t, &pods, "get", "pods", "-n", "kube-system"); err != nil {
			return err
		}
		var missing []string
		for _, component := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
			i := slices.IndexFunc(pods.Items, func(p corev1.Pod) bool { return p.Name == component+"-cp1" })
			if i < 0 || pods.Items[i].Status.Phase != corev1.PodRunning {
				missing = append(missing, component+"-cp1")
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("not running: %v", missing)
		}
		return nil
	})
	if out := c.kubectl(t, "get", "configmap", "-n", "kube-system", "kubeadm-config", "-o", "jsonpath={.data.ClusterConfiguration}"); !strings.Contains(out, "encryptionAlgorithm: ECDSA-P256") {
		t.Errorf("kubeadm-config is not kubeadm's of the lab's configuration:\n%s", out)
	}
	if out := c.kubectl(t, "get", "daemonsets", "-n", "kube-system", "-o", "name"); strings.Contains(out, "kube-proxy") {
		t.Errorf("kubeadm installed kube-proxy, whose DaemonSet mounts the host's /run/xtables.lock: %s", out)
	}

	checkStages(t, c, "cp1", slices.Concat([]string{"runtime-started", "images-ready", "bootstrap-started", "kubelet-started", "manifests-seen"},
		componentsHealthy, []string{"control-plane-healthy", "kubeadm-exited", "workflow-done"})...)
	nodeHosts, err := os.ReadFile(filepath.Join(c.root, "c", "cp1", "lab", "overlay", "etc", "hosts"))
	if err != nil || !bytes.Contains(nodeHosts, []byte("10.89.10.10 cp1\n")) {
		t.Errorf("the node's /etc/hosts does not name it (%v):\n%s", err, nodeHosts)
	}
	if now, _ := os.ReadFile("/etc/hosts"); !bytes.Equal(now, hosts) {
		t.Errorf("the host's /etc/hosts changed:\n%s", now)
	}
}

// componentsHealthy are the stages of a control-plane node's components
// answering, in the order checkStages wants them: they come in any order.
var componentsHealthy = []string{"etcd-healthy", "kube-apiserver-healthy", "kube-controller-manager-healthy", "kube-scheduler-healthy"}

// checkStages checks that node's lab-up.json marks exactly these stages,
// in this order, each no earlier than the one before; the components'
// healthy stages may come in any order among themselves, and are wanted as
// in componentsHealthy.
func checkStages(t *testing.T, c *labCluster, node string, want ...string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(c.root, "c", node, "lab-up.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var last time.Time
	for line := range bytes.Lines(data) {
		var e struct {
			Time  time.Time `json:"time"`
			Stage string    `json:"stage"`
		}
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("%s's lab-up.json: %v", node, err)
		}
		if e.Stage == "" {
			continue
		}
		if e.Time.Before(last) {
			t.Errorf("%s: stage %s at %s, before the stage ahead of it", node, e.Stage, e.Time)
		}
		got, last = append(got, e.Stage), e.Time
	}
	if i := slices.IndexFunc(got, func(s string) bool { return slices.Contains(componentsHealthy, s) }); i >= 0 {
		slices.Sort(got[i:min(i+len(componentsHealthy), len(got))])
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s's stages: %v, want %v", node, got, want)
	}
}
