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

	"github.com/kubeboot/kubeboot/internal/testsupport"
)

// TestKubeadmInit brings up a lab of one machine that the real `kubeadm
// init` v1.36.3 inits (`init: kubeadm`), the other side of make bench's
// comparison: kubeadm's control plane comes up under the machine's
// kubelet.service, which kubeadm started with its package's drop-in, and
// containerd; kubeadm made the cluster (its kubeadm-config with the lab's
// ECDSA keys, its CoreDNS and kube-proxy rolled out); the lab reports the
// node up; and the machine's own /etc/hosts names it while the host's is
// untouched.
func TestKubeadmInit(t *testing.T) {
	alongside(t)
	hosts, err := os.ReadFile("/etc/hosts")
	if err != nil {
		t.Fatal(err)
	}
	c := startMachineCluster(t, "e2ek", "10.89.10.0/24", "10.248.0.0/16", "\n- {name: cp1, role: control-plane, init: kubeadm}\n")
	r := runCommand(t, kubebootBin, "lab", "up", "--cluster", c.desc, "--bin-dir", binDir, "--package", kubebootDeb, "-o", "json")
	if r.code != 0 {
		t.Fatalf("lab up --cluster exited %d:\n%s\n%s", r.code, r.stderr, testsupport.LastLines(r.stdout, 30))
	}
	t.Logf("TIMING: lab up --cluster of one machine that kubeadm inits: %s", r.took.Round(time.Millisecond))

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
	if out := c.kubectl(t, "get", "daemonset", "-n", "kube-system", "kube-proxy", "-o", "jsonpath={.status.numberReady}"); out != "1" {
		t.Errorf("kubeadm's kube-proxy has %q pods ready, want 1", out)
	}
	if dropIns := c.exec(t, "cp1", "systemctl", "show", "kubelet", "-p", "DropInPaths", "--value"); !strings.Contains(dropIns, "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf") {
		t.Errorf("kubelet.service's drop-ins: %q", dropIns)
	}
	up := false
	for _, line := range strings.Split(r.stdout, "\n") {
		var e struct{ Phase, Msg string }
		up = up || json.Unmarshal([]byte(line), &e) == nil && e.Phase == "cp1/lab" && strings.HasPrefix(e.Msg, "up in ")
	}
	if !up {
		t.Errorf("lab up did not report cp1 up:\n%s", testsupport.LastLines(r.stdout, 10))
	}
	nodeHosts, err := os.ReadFile(filepath.Join(c.machine(t, "cp1").Root(), "etc/hosts"))
	if err != nil || !bytes.Contains(nodeHosts, []byte(" cp1\n")) {
		t.Errorf("the node's /etc/hosts does not name it (%v):\n%s", err, nodeHosts)
	}
	if now, _ := os.ReadFile("/etc/hosts"); !bytes.Equal(now, hosts) {
		t.Errorf("the host's /etc/hosts changed:\n%s", now)
	}
}
