//go:build e2e

package e2e

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/csrapprover"
)

// applied names every object init applies: kind, namespace, name.
var applied = [][3]string{
	{"configmap", "kube-system", "kubeadm-config"},
	{"configmap", "kube-system", "kubelet-config"},
	{"configmap", "kube-system", "kubeboot-config"},
	{"configmap", "kube-public", "cluster-info"},
	{"role", "kube-system", "kubeadm:nodes-kubeadm-config"},
	{"role", "kube-system", "kubeadm:kubelet-config"},
	{"role", "kube-public", "kubeadm:bootstrap-signer-clusterinfo"},
	{"rolebinding", "kube-system", "kubeadm:nodes-kubeadm-config"},
	{"rolebinding", "kube-system", "kubeadm:kubelet-config"},
	{"rolebinding", "kube-public", "kubeadm:bootstrap-signer-clusterinfo"},
	{"clusterrole", "", "kubeadm:get-nodes"},
	{"clusterrolebinding", "", "kubeadm:get-nodes"},
	{"clusterrolebinding", "", "kubeadm:kubelet-bootstrap"},
	{"clusterrolebinding", "", "kubeadm:node-autoapprove-bootstrap"},
	{"clusterrolebinding", "", "kubeadm:node-autoapprove-certificate-rotation"},
	{"clusterrolebinding", "", "kubeadm:cluster-admins"},
	{"clusterrolebinding", "", "kubeboot:apiserver-kubelet-client"},
}

const nodeGroup = "system:bootstrappers:kubeadm:default-node-token"

// TestClusterObjects inits a control-plane machine and checks the objects that make it
// joinable: their shapes, what an anonymous client can and cannot read,
// the token commands, and that init run again changes none of them.
func TestClusterObjects(t *testing.T) {
	alongside(t)
	n := newNode(t, "objects", "10.89.21.0/24")
	r := n.up(t)
	events, res, err := parseJSONOutput(r.stdout)
	if err != nil {
		t.Fatalf("init -o json output: %v\nstderr: %s", err, r.stderr)
	}
	if r.code != 0 || !res.OK {
		t.Fatalf("init exited %d: %s\nstderr: %s", r.code, res.Error, r.stderr)
	}
	for _, p := range strings.Split(livePhases, ",") {
		if !slices.Contains(res.Phases, p) {
			t.Errorf("phase %s did not run: %v", p, res.Phases)
		}
	}
	// kubelet-finalize pointed kubelet.conf at the certificate the kubelet
	// rotates, in its own cert dir on the machine.
	const pair = "/var/lib/kubelet/pki/kubelet-client-current.pem"
	if conf, err := os.ReadFile(n.path("kubelet.conf")); err != nil || !strings.Contains(string(conf), "client-certificate: "+pair+"\n") ||
		strings.Contains(string(conf), "client-certificate-data") {
		t.Errorf("kubelet.conf does not name %s (%v):\n%s", pair, err, conf)
	}
	// A link, to an absolute path in the machine.
	if _, err := os.Lstat(filepath.Join(n.m.Root(), pair)); err != nil {
		t.Errorf("the kubelet's rotated certificate: %v", err)
	}
	join := joinCommandOf(t, r.stdout)
	token := checkJoinCommand(t, n, join)
	_, secret, _ := strings.Cut(token, ".")
	for _, e := range events {
		if strings.Contains(e.Msg, secret) {
			t.Errorf("a progress event shows the token's secret: %s", e.Msg)
		}
	}
	if strings.Contains(r.stderr, secret) {
		t.Error("stderr shows the token's secret")
	}
	tokenID, _, _ := strings.Cut(token, ".")

	t.Run("objects", func(t *testing.T) { checkObjects(t, n, tokenID) })
	t.Run("anonymous access", func(t *testing.T) { checkAnonymous(t, n, tokenID) })
	t.Run("the token's grants", func(t *testing.T) { checkTokenGrants(t, n, token) })
	t.Run("re-run changes no object", func(t *testing.T) { checkRerunObjects(t, n, join) })
	t.Run("token commands", func(t *testing.T) { checkTokenCommands(t, n) })
}

// joinCommandOf reads the join command from the result of `-o json`.
func joinCommandOf(t *testing.T, stdout string) string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	var last struct {
		Result struct {
			JoinCommand string `json:"joinCommand"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Result.JoinCommand == "" {
		t.Fatalf("the result holds no join command (%v): %s", err, lines[len(lines)-1])
	}
	return last.Result.JoinCommand
}

// checkJoinCommand checks the endpoint and the CA pin, worked out here
// from ca.crt, and returns the token.
func checkJoinCommand(t *testing.T, n *node, join string) string {
	t.Helper()
	m := regexp.MustCompile(`^kubeboot join (\S+) --token ([a-z0-9]{6}\.[a-z0-9]{16}) --discovery-token-ca-cert-hash sha256:([0-9a-f]{64})$`).FindStringSubmatch(join)
	if m == nil {
		t.Fatalf("join command %q", join)
	}
	block, _ := pem.Decode(readFile(t, n.path("pki/ca.crt")))
	if block == nil {
		t.Fatal("ca.crt holds no PEM block")
	}
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(ca.RawSubjectPublicKeyInfo)
	if m[1] != n.addr+":6443" || m[3] != hex.EncodeToString(sum[:]) {
		t.Errorf("join command endpoint %s, CA pin %s; want %s:6443 and %x", m[1], m[3], n.addr, sum)
	}
	return m[2]
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// get reads one object with kubectl into out.
func get(t *testing.T, n *node, out any, kind, namespace, name string) {
	t.Helper()
	// kubectl leaves managedFields out unless asked.
	args := []string{"get", kind, name, "-o", "json", "--show-managed-fields"}
	if namespace != "" {
		args = append(args, "-n", namespace)
	}
	if err := json.Unmarshal([]byte(n.kubectl(t, args...)), out); err != nil {
		t.Fatalf("decode %s %s/%s: %v", kind, namespace, name, err)
	}
}

func checkObjects(t *testing.T, n *node, tokenID string) {
	var kubeadm corev1.ConfigMap
	get(t, n, &kubeadm, "configmap", "kube-system", "kubeadm-config")
	var cc map[string]any
	if err := yaml.Unmarshal([]byte(kubeadm.Data["ClusterConfiguration"]), &cc); err != nil {
		t.Fatalf("kubeadm-config: %v", err)
	}
	if cc["apiVersion"] != "kubeadm.k8s.io/v1beta4" || cc["kind"] != "ClusterConfiguration" || cc["kubernetesVersion"] != kubernetesVersion ||
		cc["clusterName"] != "e2e" || cc["certificatesDir"] != n.path("pki") {
		t.Errorf("kubeadm-config ClusterConfiguration: %v", cc)
	}
	var kubelet corev1.ConfigMap
	get(t, n, &kubelet, "configmap", "kube-system", "kubelet-config")
	var kc map[string]any
	if err := yaml.Unmarshal([]byte(kubelet.Data["kubelet"]), &kc); err != nil {
		t.Fatalf("kubelet-config: %v", err)
	}
	if kc["kind"] != "KubeletConfiguration" || kc["address"] != nil || kc["healthzBindAddress"] != "127.0.0.1" || kc["containerRuntimeEndpoint"] != nil {
		t.Errorf("kubelet-config holds node-specific fields or is no KubeletConfiguration: %v", kc)
	}
	// kubeadm's grants, and a node-bound token's beside a cluster-wide
	// one's, but for the controller-manager's approval of its CSR.
	names := func(subjects []rbacv1.Subject) []string {
		var out []string
		for _, s := range subjects {
			out = append(out, s.Kind+":"+s.Name)
		}
		return out
	}
	for _, name := range []string{"kubeadm:nodes-kubeadm-config", "kubeadm:kubelet-config"} {
		var rb rbacv1.RoleBinding
		get(t, n, &rb, "rolebinding", "kube-system", name)
		if want := []string{"Group:" + nodeGroup, "Group:" + csrapprover.BoundGroup, "Group:system:nodes"}; rb.RoleRef.Name != name || !slices.Equal(names(rb.Subjects), want) {
			t.Errorf("RoleBinding %s: %+v %+v, want subjects %v", name, rb.RoleRef, rb.Subjects, want)
		}
	}
	for name, want := range map[string][]string{
		"kubeadm:kubelet-bootstrap":                     {"system:node-bootstrapper", "Group:" + nodeGroup, "Group:" + csrapprover.BoundGroup},
		"kubeadm:node-autoapprove-bootstrap":            {"system:certificates.k8s.io:certificatesigningrequests:nodeclient", "Group:" + nodeGroup},
		"kubeadm:node-autoapprove-certificate-rotation": {"system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "Group:system:nodes"},
		"kubeadm:get-nodes":                             {"kubeadm:get-nodes", "Group:" + nodeGroup, "Group:" + csrapprover.BoundGroup},
	} {
		var crb rbacv1.ClusterRoleBinding
		get(t, n, &crb, "clusterrolebinding", "", name)
		if crb.RoleRef.Name != want[0] || !slices.Equal(names(crb.Subjects), want[1:]) {
			t.Errorf("ClusterRoleBinding %s: %+v %+v, want subjects %v", name, crb.RoleRef, crb.Subjects, want[1:])
		}
	}
	var rb rbacv1.RoleBinding
	get(t, n, &rb, "rolebinding", "kube-public", "kubeadm:bootstrap-signer-clusterinfo")
	if len(rb.Subjects) != 1 || rb.Subjects[0].Kind != "User" || rb.Subjects[0].Name != "system:anonymous" {
		t.Errorf("cluster-info readers: %+v", rb.Subjects)
	}

	var node corev1.Node
	get(t, n, &node, "node", "", n.name)
	if v, ok := node.Labels["node-role.kubernetes.io/control-plane"]; !ok || v != "" {
		t.Errorf("node labels %v", node.Labels)
	}
	if !slices.ContainsFunc(node.Spec.Taints, func(tt corev1.Taint) bool {
		return tt.Key == "node-role.kubernetes.io/control-plane" && tt.Effect == corev1.TaintEffectNoSchedule
	}) {
		t.Errorf("node taints %v", node.Spec.Taints)
	}

	var secret corev1.Secret
	get(t, n, &secret, "secret", "kube-system", "bootstrap-token-"+tokenID)
	for key, want := range map[string]string{
		"token-id": tokenID, "usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true", "auth-extra-groups": nodeGroup,
	} {
		if got := string(secret.Data[key]); got != want {
			t.Errorf("token Secret %s = %q, want %q", key, got, want)
		}
	}
	expires, err := time.Parse(time.RFC3339, string(secret.Data["expiration"]))
	if left := time.Until(expires); err != nil || left < 23*time.Hour || left > 25*time.Hour {
		t.Errorf("token expires %s (%v), want in 24h", secret.Data["expiration"], err)
	}
	if secret.Type != "bootstrap.kubernetes.io/token" || secret.Labels["kubeboot.io/created-by"] != "init" {
		t.Errorf("token Secret type %s, labels %v", secret.Type, secret.Labels)
	}
}

// objectState is what an apply that changes nothing leaves alone.
type objectState struct {
	ResourceVersion string
	Kubeboot        []metav1.ManagedFieldsEntry
}

// objectStates reads every object init applies. The Node's
// resourceVersion moves with the kubelet's status updates, and another
// manager may take over one of kubeboot's fields of it (the node lifecycle
// controller, which updates the taints kubeboot applied once the Node is
// Ready), so for it only the time of kubeboot's managedFields entry
// counts: it moves only when kubeboot applies.
func objectStates(t *testing.T, n *node, tokenID string) map[string]objectState {
	t.Helper()
	all := append(slices.Clone(applied), [3]string{"node", "", n.name}, [3]string{"secret", "kube-system", "bootstrap-token-" + tokenID})
	states := map[string]objectState{}
	for _, o := range all {
		var obj struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		get(t, n, &obj, o[0], o[1], o[2])
		st := objectState{ResourceVersion: obj.Metadata.ResourceVersion}
		for _, f := range obj.Metadata.ManagedFields {
			if f.Manager == "kubeboot" {
				st.Kubeboot = append(st.Kubeboot, f)
			}
		}
		if o[0] == "node" {
			st.ResourceVersion = ""
			if len(st.Kubeboot) == 0 {
				t.Errorf("kubeboot manages no field of the Node")
			}
			for i := range st.Kubeboot {
				st.Kubeboot[i].FieldsV1 = nil
			}
		}
		states[strings.Join(o[:], " ")] = st
	}
	return states
}

func checkRerunObjects(t *testing.T, n *node, join string) {
	tokenID := strings.Fields(join)[4][:6]
	before := objectStates(t, n, tokenID)
	r := n.kubeboot(t, "init", "--config", n.config, "-o", "json")
	_, res, err := parseJSONOutput(r.stdout)
	if err != nil || r.code != 0 || !res.OK {
		t.Fatalf("re-run exited %d (%v): %s", r.code, err, r.stderr)
	}
	if again := joinCommandOf(t, r.stdout); again != join {
		t.Errorf("the re-run made a new token: %s", again)
	}
	if diff := cmp.Diff(before, objectStates(t, n, tokenID)); diff != "" {
		t.Errorf("init run again changed objects (-before +after):\n%s", diff)
	}
}
