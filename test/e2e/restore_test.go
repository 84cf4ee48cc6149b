//go:build e2e

package e2e

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubeboot/kubeboot/internal/bootstrap"
)

// restoreWhileProbing is the one-control-plane disaster: objects are made
// and a snapshot saved on cp1; some objects change, one goes, one comes;
// then etcd's database is destroyed while etcd is stopped (overwritten
// with zeros, so etcd cannot start again) and cp1 restores the snapshot,
// while a probe on w1 gets /hostname from the web Service's ClusterIP
// (backends on w2) every 100 ms. The objects are as at the snapshot, the
// workers are Ready as the same Nodes with the kubelet credentials they
// had (they never rejoined), web's pods are the same, and the Service's
// longest gap is reported.
func (c *machineCluster) restoreWhileProbing(t *testing.T) {
	t.Helper()
	c.kubectl(t, "create", "namespace", "dr")
	for _, name := range []string{"kept", "changed", "deleted"} {
		c.kubectl(t, "-n", "dr", "create", "configmap", name, "--from-literal=v=before")
	}
	backends := c.backendNames(t)
	nodeUIDs := c.nodeUIDs(t)
	kubeletConfs := map[string]string{}
	for _, w := range []string{"w1", "w2"} {
		kubeletConfs[w] = string(readFile(t, filepath.Join(c.machine(t, w).Root(), "etc/kubernetes/kubelet.conf")))
	}

	out, err := c.kubebootOnCP1("etcd", "snapshot", "save", "--config", bootstrap.ConfigPath, "-o", "json").Output()
	_, res, perr := parseJSONOutput(string(out))
	if err != nil || perr != nil || res.Snapshot == nil {
		t.Fatalf("etcd snapshot save on cp1: %v, %v:\n%s", err, perr, out)
	}
	snapshot := res.Snapshot.Path

	c.kubectl(t, "-n", "dr", "patch", "configmap", "changed", "-p", `{"data":{"v":"after"}}`)
	c.kubectl(t, "-n", "dr", "delete", "configmap", "deleted")
	c.kubectl(t, "-n", "dr", "create", "configmap", "created", "--from-literal=v=after")

	clusterIP := c.kubectl(t, "get", "service", "web", "-o", "jsonpath={.spec.clusterIP}")
	c.destroyEtcd(t)
	probe := newServiceProbe("/run/netns/kb-"+c.name+"-w1", "http://"+clusterIP+"/hostname")
	start := time.Now()
	stderr, err := timedLines(c.kubebootOnCP1("etcd", "restore", "--snapshot", snapshot, "--config", bootstrap.ConfigPath))
	took := time.Since(start)
	probes, failures, gap := probe.stop()
	if err != nil {
		t.Fatalf("etcd restore: %v:\n%s", err, stderr)
	}
	t.Logf("TIMING: etcd restore on cp1 (etcd destroyed): %s; the Service answered %d of %d probes, longest gap %s; its progress:\n%s",
		took.Round(time.Millisecond), probes-failures, probes, gap.Round(time.Millisecond), stderr)
	// kube-proxy's rules stay in the workers' kernels while the API server
	// is away, and the pods run on: the expected gap is none.
	if probes < 10 || gap > 10*time.Second {
		t.Errorf("the Service's longest gap during the restore was %s over %d probes (last failure: %s)", gap, probes, probe.gapReason)
	}

	for name, want := range map[string]string{"kept": "before", "changed": "before", "deleted": "before"} {
		if v, err := c.kubectlErr(t, "-n", "dr", "get", "configmap", name, "-o", "jsonpath={.data.v}"); err != nil || v != want {
			t.Errorf("configmap dr/%s after the restore: %q, %v; want %q, its value at the snapshot", name, v, err, want)
		}
	}
	if _, err := c.kubectlErr(t, "-n", "dr", "get", "configmap", "created"); err == nil || !strings.Contains(err.Error(), "NotFound") {
		t.Errorf("configmap dr/created, made after the snapshot, after the restore: %v", err)
	}
	c.readyNodes(t, 3)
	if got := c.nodeUIDs(t); !maps.Equal(got, nodeUIDs) {
		t.Errorf("Nodes after the restore %v, want the same Nodes %v: no worker rejoined", got, nodeUIDs)
	}
	for w, before := range kubeletConfs {
		if now := string(readFile(t, filepath.Join(c.machine(t, w).Root(), "etc/kubernetes/kubelet.conf"))); now != before {
			t.Errorf("%s's kubelet.conf changed during the restore", w)
		}
	}
	if got := c.backendNames(t); !slices.Equal(got, backends) {
		t.Errorf("web's pods after the restore: %v, want the same %v", got, backends)
	}
	if got := c.dialService(t); !slices.Equal(got, backends) {
		t.Errorf("after the restore the ClusterIP of web was answered by %v, want %v", got, backends)
	}
}

// destroyEtcd stops cp1's etcd (its manifest moved out), overwrites its
// database with zeros and puts the manifest back: etcd cannot start again,
// and the API server has no storage.
func (c *machineCluster) destroyEtcd(t *testing.T) {
	t.Helper()
	root := c.machine(t, "cp1").Root()
	manifest := filepath.Join(root, "etc/kubernetes/manifests/etcd.yaml")
	parked := filepath.Join(c.root, "etcd.yaml.parked")
	if err := os.Rename(manifest, parked); err != nil {
		t.Fatal(err)
	}
	eventually(t, "cp1's etcd stopped", func() error {
		if r := runCommand(t, kubebootBin, "lab", "exec", "--cluster", c.desc, "cp1", "--", "pgrep", "-x", "etcd"); r.code == 0 {
			return fmt.Errorf("etcd runs as pid %s", strings.TrimSpace(r.stdout))
		}
		return nil
	})
	db := filepath.Join(root, "var/lib/etcd/member/snap/db")
	st, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(db, make([]byte, st.Size()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(parked, manifest); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the API server without its storage", func() error {
		if _, err := c.kubectlErr(t, "get", "--raw", "/readyz"); err == nil {
			return fmt.Errorf("the API server is ready")
		}
		return nil
	})
}

// nodeUIDs are the cluster's Nodes' UIDs by name.
func (c *labCluster) nodeUIDs(t *testing.T) map[string]string {
	t.Helper()
	var list corev1.NodeList
	if err := c.kubectlJSON(t, &list, "get", "nodes"); err != nil {
		t.Fatal(err)
	}
	uids := map[string]string{}
	for _, n := range list.Items {
		uids[n.Name] = string(n.UID)
	}
	return uids
}
