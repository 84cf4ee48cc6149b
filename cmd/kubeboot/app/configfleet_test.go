package app

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubeboot/kubeboot/internal/csrapprover"
	"github.com/kubeboot/kubeboot/internal/tokens"
)

// TestConfigFleet: `config fleet` on examples/fleet.yaml writes every
// node's file and says so; again it writes nothing; a description with a
// mistake exits 2 naming its file and field, and writes nothing.
func TestConfigFleet(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fleet")
	code, stdout, stderr := runCLI(t, "config", "fleet", "--cluster", "../../../examples/fleet.yaml", "--out", dir)
	if code != 0 || !strings.Contains(stdout, "wrote "+filepath.Join(dir, "nodes/cp1.yaml")) || !strings.Contains(stdout, "20 files written, 0 unchanged; the nodes pin the CA sha256:") {
		t.Fatalf("exit %d:\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "config", "fleet", "--cluster", "../../../examples/fleet.yaml", "--out", dir, "-o", "json")
	var result struct {
		Written []string          `json:"written"`
		Nodes   map[string]string `json:"nodes"`
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &result) != nil || len(result.Written) != 0 || result.Nodes["w2"] != "nodes/w2.yaml" {
		t.Fatalf("second run: exit %d:\n%s%s", code, stdout, stderr)
	}

	bad := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: kubeboot.io/v1alpha1\nkind: Fleet\nnodes:\n- {name: cp1, role: master, address: 10.0.0.11}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out")
	code, _, stderr = runCLI(t, "config", "fleet", "--cluster", bad, "--out", out)
	if code != 2 || !strings.Contains(stderr, bad+`: nodes[0].role: "master": want control-plane or worker`) {
		t.Fatalf("a bad role: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("the refused run made %s", out)
	}
	if code, _, stderr = runCLI(t, "config", "fleet", "--out", out); code != 2 || !strings.Contains(stderr, "--cluster and --out are required") {
		t.Errorf("without --cluster: exit %d: %s", code, stderr)
	}
}

// TestConfigFleetAdmitsAnAddedWorker: a worker added after the first
// node's file was written leaves that file as it was; the run says the
// worker must be admitted, and with --kubeconfig makes its node-bound
// token in the cluster. A kubeconfig that cannot be read changes nothing.
func TestConfigFleetAdmitsAnAddedWorker(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fleet")
	if code, stdout, stderr := runCLI(t, "config", "fleet", "--cluster", "../../../examples/fleet.yaml", "--out", dir); code != 0 {
		t.Fatalf("exit %d:\n%s%s", code, stdout, stderr)
	}
	cp1, err := os.ReadFile(filepath.Join(dir, "nodes/cp1.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("../../../examples/fleet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bigger := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(bigger, append(example, "- {name: w3, role: worker, address: 10.0.1.23}\n"...), 0o600); err != nil {
		t.Fatal(err)
	}

	missing := filepath.Join(t.TempDir(), "admin.conf")
	if code, _, stderr := runCLI(t, "config", "fleet", "--cluster", bigger, "--out", dir, "--kubeconfig", missing); code != 2 || !strings.Contains(stderr, "--kubeconfig: stat "+missing) {
		t.Fatalf("a missing kubeconfig: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "nodes/w3.yaml")); !os.IsNotExist(err) {
		t.Fatal("a run refused for its kubeconfig wrote w3's file")
	}

	code, stdout, stderr := runCLI(t, "config", "fleet", "--cluster", bigger, "--out", dir)
	if code != 0 || !strings.Contains(stdout, "worker w3 joins once its token is in the cluster") || strings.Contains(stdout, "nodes/cp1.yaml") {
		t.Fatalf("w3 added: exit %d:\n%s%s", code, stdout, stderr)
	}
	if now, _ := os.ReadFile(filepath.Join(dir, "nodes/cp1.yaml")); string(now) != string(cp1) {
		t.Error("adding w3 changed cp1's file")
	}

	kubeconfig := filepath.Join(t.TempDir(), "admin.conf")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1"}})
	d := newDeps("")
	d.adminClient = func(data []byte) (kubernetes.Interface, error) {
		if string(data) != "apiVersion: v1\nkind: Config\n" {
			t.Errorf("the client was built from %q, not --kubeconfig's file", data)
		}
		return client, nil
	}
	code, stdout, stderr = runCLIWith(t, d, "config", "fleet", "--cluster", bigger, "--out", dir, "--kubeconfig", kubeconfig, "-o", "json")
	var result struct {
		ToAdmit  []string           `json:"toAdmit"`
		Admitted []tokens.Admission `json:"admitted"`
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &result) != nil {
		t.Fatalf("--kubeconfig: exit %d:\n%s%s", code, stdout, stderr)
	}
	results := map[string]string{}
	for _, a := range result.Admitted {
		results[a.Node] = a.Result
	}
	if !slices.Equal(result.ToAdmit, []string{"w3"}) || results["w1"] != tokens.Joined || results["w2"] != "created" || results["w3"] != "created" {
		t.Errorf("--kubeconfig: to admit %v, admitted %v", result.ToAdmit, results)
	}
	w3, _ := os.ReadFile(filepath.Join(dir, "nodes/w3.yaml"))
	secrets, err := client.CoreV1().Secrets("kube-system").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range secrets.Items {
		token := string(s.Data["token-id"]) + "." + string(s.Data["token-secret"])
		found = found || strings.Contains(string(w3), "token: "+token) && string(s.Data["auth-extra-groups"]) == csrapprover.BoundGroup+","+csrapprover.BoundNodeGroup("w3")
	}
	if !found {
		t.Error("no token Secret in the cluster holds w3's token, bound to w3")
	}
}
