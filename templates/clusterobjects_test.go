package templates

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/csrapprover"
)

// objectsYAML renders objects as one YAML document each, in apply order.
func objectsYAML(t *testing.T, objs Objects) string {
	t.Helper()
	var docs []string
	for _, o := range objs.list() {
		data, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(data))
	}
	return strings.Join(docs, "---\n")
}

// list is every object, in apply order.
func (o Objects) list() []runtime.Object {
	var out []runtime.Object
	for _, x := range o.ServiceAccounts {
		out = append(out, x)
	}
	for _, x := range o.ConfigMaps {
		out = append(out, x)
	}
	for _, x := range o.Roles {
		out = append(out, x)
	}
	for _, x := range o.RoleBindings {
		out = append(out, x)
	}
	for _, x := range o.ClusterRoles {
		out = append(out, x)
	}
	for _, x := range o.ClusterRoleBindings {
		out = append(out, x)
	}
	for _, x := range o.Services {
		out = append(out, x)
	}
	for _, x := range o.Deployments {
		out = append(out, x)
	}
	for _, x := range o.DaemonSets {
		out = append(out, x)
	}
	return out
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	checkGoldenIn(t, "cluster-objects", name, got)
}

// checkGoldenIn compares got with testdata/<dir>/<name>.golden.
func checkGoldenIn(t *testing.T, dir, name, got string) {
	t.Helper()
	golden := filepath.Join("testdata", dir, name+".golden")
	if *update {
		if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./templates -update)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s mismatch (-golden +got):\n%s", golden, diff)
	}
}

// TestClusterObjectsGolden pins every object of node join and the kubeadm
// ClusterConfiguration of a default, an overridden and an external-etcd
// configuration.
func TestClusterObjectsGolden(t *testing.T) {
	kubeadm, err := KubeadmClusterConfiguration(newConfig(nil))
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "upload-config", objectsYAML(t, UploadConfigObjects("v1.36.3", kubeadm, []byte("kind: KubeletConfiguration\n"), []byte("kind: ClusterConfiguration\n"))))
	checkGolden(t, "bootstrap-token", objectsYAML(t, BootstrapTokenRBAC()))
	checkGolden(t, "cluster-info", objectsYAML(t, ClusterInfoObjects([]byte("apiVersion: v1\nkind: Config\n"), nil)))
	checkGolden(t, "csr-approver", objectsYAML(t, CSRApproverRBAC("kubeboot:csr-approver")))

	for name, edit := range map[string]func(*config.ClusterConfiguration){
		"kubeadm-default": nil,
		"kubeadm-overrides": func(c *config.ClusterConfiguration) {
			overrides(c)
			c.ClusterName = "lab"
			c.ControlPlaneEndpoint = "lb.example:443"
			c.Networking.PodSubnet = "10.244.0.0/16"
			c.APIServer.CertSANs = []string{"lb.example", "10.0.0.100"}
			c.Certificates.KeyAlgorithm = config.RSA3072
			c.Etcd.Local.ServerCertSANs = []string{"etcd.example"}
		},
		"kubeadm-external-etcd": func(c *config.ClusterConfiguration) {
			c.Etcd.External = &config.ExternalEtcd{Endpoints: []string{"https://10.0.0.2:2379", "https://10.0.0.3:2379"}, CAFile: "/etc/etcd/ca.crt", CertFile: "/etc/etcd/client.crt", KeyFile: "/etc/etcd/client.key"}
		},
	} {
		t.Run(name, func(t *testing.T) {
			data, err := KubeadmClusterConfiguration(newConfig(edit))
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, name, string(data))
		})
	}
}

// TestKubeadmClusterConfiguration checks what kubeadm reads from it.
func TestKubeadmClusterConfiguration(t *testing.T) {
	cfg := newConfig(func(c *config.ClusterConfiguration) {
		overrides(c)
		c.Certificates.KeyAlgorithm = config.ECDSAP384
	})
	data, err := KubeadmClusterConfiguration(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := yaml.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if got["apiVersion"] != "kubeadm.k8s.io/v1beta4" || got["kind"] != "ClusterConfiguration" || got["kubernetesVersion"] != cfg.KubernetesVersion {
		t.Errorf("type or version: %v %v %v", got["apiVersion"], got["kind"], got["kubernetesVersion"])
	}
	if got["encryptionAlgorithm"] != "ECDSA-P384" || got["certificatesDir"] != "/etc/kubernetes/pki" {
		t.Errorf("encryptionAlgorithm %v, certificatesDir %v", got["encryptionAlgorithm"], got["certificatesDir"])
	}
	etcd := got["etcd"].(map[string]any)["local"].(map[string]any)
	var args []string
	for _, a := range etcd["extraArgs"].([]any) {
		args = append(args, a.(map[string]any)["name"].(string))
	}
	// snapshot-count is a removal, which kubeadm cannot express.
	if strings.Join(args, ",") != "listen-metrics-urls,quota-backend-bytes" {
		t.Errorf("etcd extraArgs %v", args)
	}
	// A repeated flag stays repeated, in order.
	issuers := 0
	for _, a := range got["apiServer"].(map[string]any)["extraArgs"].([]any) {
		if a.(map[string]any)["name"] == "service-account-issuer" {
			issuers++
		}
	}
	if issuers != 2 {
		t.Errorf("apiServer extraArgs hold %d service-account-issuer, want 2", issuers)
	}
}

// TestObjectsAreWhatTheServerStores checks the fields the API server would
// otherwise fill in, which would make every apply a change.
func TestObjectsAreWhatTheServerStores(t *testing.T) {
	all := []Objects{UploadConfigObjects("v1.36.3", []byte("a"), []byte("b"), []byte("d")), BootstrapTokenRBAC(), ClusterInfoObjects([]byte("c"), nil), CSRApproverRBAC("u")}
	for _, build := range []func(*config.ClusterConfiguration) (Objects, error){CoreDNSObjects, KubeProxyObjects} {
		objs, err := build(newConfig(nil))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, objs)
	}
	names := map[string]bool{}
	for _, objs := range all {
		for _, o := range objs.list() {
			m, _ := o.(metav1.Object)
			kind := o.GetObjectKind().GroupVersionKind()
			if kind.Kind == "" || kind.Version == "" {
				t.Errorf("%s has no apiVersion and kind", m.GetName())
			}
			if names[kind.Kind+"/"+m.GetNamespace()+"/"+m.GetName()] {
				t.Errorf("%s %s/%s built twice", kind.Kind, m.GetNamespace(), m.GetName())
			}
			names[kind.Kind+"/"+m.GetNamespace()+"/"+m.GetName()] = true
			namespaced := kind.Kind != "ClusterRole" && kind.Kind != "ClusterRoleBinding"
			if namespaced != (m.GetNamespace() != "") {
				t.Errorf("%s %s: namespace %q", kind.Kind, m.GetName(), m.GetNamespace())
			}
			data, err := json.Marshal(o)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(data), `:""`) || strings.Contains(string(data), "null") || strings.Contains(string(data), "creationTimestamp") {
				t.Errorf("%s %s carries an empty field: %s", kind.Kind, m.GetName(), data)
			}
		}
		for _, b := range objs.RoleBindings {
			checkSubjects(t, b.Name, b.Subjects)
		}
		for _, b := range objs.ClusterRoleBindings {
			checkSubjects(t, b.Name, b.Subjects)
		}
	}
}

func checkSubjects(t *testing.T, binding string, subjects []rbacv1.Subject) {
	t.Helper()
	for _, s := range subjects {
		// The API server defaults the apiGroup of users and groups, and
		// stores a service account's as empty.
		want := rbacv1.GroupName
		if s.Kind == rbacv1.ServiceAccountKind {
			want = ""
		}
		if s.APIGroup != want {
			t.Errorf("binding %s: %s subject %s has apiGroup %q, which the API server would store as %q", binding, s.Kind, s.Name, s.APIGroup, want)
		}
	}
}

// TestNodeJoinGrants checks who may do what, as kubeadm grants it.
func TestNodeJoinGrants(t *testing.T) {
	bindings := map[string]*rbacv1.ClusterRoleBinding{}
	for _, b := range BootstrapTokenRBAC().ClusterRoleBindings {
		bindings[b.Name] = b
	}
	// A node-bound token may do what a cluster-wide one may, but for the
	// controller-manager's approval of its CSR, which kubeboot's approver
	// decides.
	for name, want := range map[string][]string{
		"kubeadm:kubelet-bootstrap":                     {"system:node-bootstrapper", bootstraptoken.NodeGroup, csrapprover.BoundGroup},
		"kubeadm:node-autoapprove-bootstrap":            {"system:certificates.k8s.io:certificatesigningrequests:nodeclient", bootstraptoken.NodeGroup},
		"kubeadm:node-autoapprove-certificate-rotation": {"system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "system:nodes"},
		"kubeadm:get-nodes":                             {"kubeadm:get-nodes", bootstraptoken.NodeGroup, csrapprover.BoundGroup},
	} {
		b := bindings[name]
		var groups []string
		for _, s := range b.Subjects {
			if s.Kind == "Group" {
				groups = append(groups, s.Name)
			}
		}
		if b == nil || b.RoleRef.Name != want[0] || !slices.Equal(groups, want[1:]) || len(b.Subjects) != len(groups) {
			t.Errorf("binding %s = %+v, want role %s for groups %v", name, b, want[0], want[1:])
		}
	}
	info := ClusterInfoObjects(nil, nil)
	if r := info.Roles[0].Rules; len(r) != 1 || strings.Join(r[0].Verbs, ",") != "get" || strings.Join(r[0].ResourceNames, ",") != "cluster-info" {
		t.Errorf("cluster-info role rules %+v: want get of cluster-info only", r)
	}
	if s := info.RoleBindings[0].Subjects; len(s) != 1 || s[0].Kind != "User" || s[0].Name != "system:anonymous" {
		t.Errorf("cluster-info readers %+v: want system:anonymous only", s)
	}
	if ClusterInfoPath != "/api/v1/namespaces/kube-public/configmaps/cluster-info" {
		t.Errorf("ClusterInfoPath = %s", ClusterInfoPath)
	}
}

func TestMarkControlPlane(t *testing.T) {
	other := corev1.Taint{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoExecute}
	const socket = "unix:///run/containerd/containerd.sock"
	node := func(labels map[string]string, taints ...corev1.Taint) *corev1.Node {
		annotations := map[string]string{AnnotationCRISocket: socket}
		if labels == nil {
			annotations = nil
		}
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ResourceVersion: "7", Labels: labels, Annotations: annotations}, Spec: corev1.NodeSpec{Taints: taints}}
	}
	unannotated := node(map[string]string{LabelControlPlane: ""}, ControlPlaneTaint)
	unannotated.Annotations = nil
	marked := map[string]string{LabelControlPlane: "", "kubernetes.io/os": "linux"}
	tests := []struct {
		name   string
		node   *corev1.Node
		taint  bool
		needed bool
		taints []corev1.Taint
	}{
		{"fresh node", node(nil), true, true, []corev1.Taint{ControlPlaneTaint}},
		{"other taints kept in order", node(nil, other), true, true, []corev1.Taint{other, ControlPlaneTaint}},
		{"marked already", node(marked, other, ControlPlaneTaint), true, false, []corev1.Taint{other, ControlPlaneTaint}},
		{"label with a value", node(map[string]string{LabelControlPlane: "true"}, ControlPlaneTaint), true, true, []corev1.Taint{ControlPlaneTaint}},
		{"taint off, none there", node(marked, other), false, false, []corev1.Taint{other}},
		{"taint off, taint there", node(marked, ControlPlaneTaint, other), false, true, []corev1.Taint{other}},
		{"taint off, last taint", node(marked, ControlPlaneTaint), false, true, []corev1.Taint{}},
		{"no CRI socket annotation", unannotated, true, true, []corev1.Taint{ControlPlaneTaint}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.node.DeepCopy()
			marks, needed := MarkControlPlane(tt.node, tt.taint, socket)
			if needed != tt.needed {
				t.Errorf("needed = %v, want %v", needed, tt.needed)
			}
			if diff := cmp.Diff(tt.taints, marks.Spec.Taints); diff != "" {
				t.Errorf("taints (-want +got):\n%s", diff)
			}
			if !cmp.Equal(before, tt.node) {
				t.Error("MarkControlPlane changed the node it was given")
			}
			data, err := json.Marshal(marks)
			if err != nil {
				t.Fatal(err)
			}
			// The label alone (other labels are not the phase's), the
			// resourceVersion read, and the taints, even when empty.
			for _, want := range []string{`"labels":{"node-role.kubernetes.io/control-plane":""}`, `"annotations":{"kubeadm.alpha.kubernetes.io/cri-socket":"` + socket + `"}`, `"resourceVersion":"7"`, `"taints":[`} {
				if !strings.Contains(string(data), want) {
					t.Errorf("patch %s lacks %s", data, want)
				}
			}
		})
	}
}

func TestMissingJoinControllers(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []config.Arg
		want []string
	}{
		{"default flags", nil, nil},
		{"defaults only", []config.Arg{{Name: "controllers", Value: "*"}}, JoinControllers},
		{"one turned off", []config.Arg{{Name: "controllers", Value: "*,bootstrapsigner,-tokencleaner"}}, []string{"tokencleaner"}},
		{"flag removed", []config.Arg{{Name: "controllers", Remove: true}}, JoinControllers},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pod, err := ControllerManager(newConfig(func(c *config.ClusterConfiguration) { c.ControllerManager.ExtraArgs = tt.args }))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, MissingJoinControllers(pod)); diff != "" {
				t.Errorf("missing (-want +got):\n%s", diff)
			}
		})
	}
}
