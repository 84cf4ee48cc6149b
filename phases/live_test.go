package phases

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/files"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/pki"
)

// The helpers of the tests of the live phases, which talk to the API
// server: a fake clientset, which applies with field management as the API
// server does. It stores every write, though, even one that changes
// nothing, and keeps no resourceVersion: a converged re-run is proven by
// the objects being the same before and after it.

// liveState is a State for node1 on a throw-away root whose API client is
// a fake clientset holding objs; out collects the progress lines, as JSON
// events when asJSON.
func liveState(t testing.TB, asJSON bool, objs ...runtime.Object) (*Node, *fake.Clientset, *bytes.Buffer) {
	t.Helper()
	c := config.New()
	config.SetDefaults(c, config.Host{Name: "node1", Address: "10.0.0.10"})
	c.Timeouts.ControlPlane.Duration = 5 * time.Second
	var out bytes.Buffer
	client := fake.NewClientset(objs...)
	s := &Node{Run: &workflow.Run{System: workflow.HostSystem("v0.0.0-test"), Files: &files.AtomicWriter{Root: t.TempDir()}, Report: output.NewReporter(&out, asJSON), API: client}, Config: c}
	return s, client, &out
}

// writeCA gives s a cluster CA, as the certs phase would, and returns its
// certificate.
func writeCA(t *testing.T, s *Node) []byte {
	t.Helper()
	ca, err := pki.NewCA(pki.CertSpecs(s.Config)[0])
	if err != nil {
		t.Fatal(err)
	}
	must(t, s.Files.MkdirAll(s.Config.Certificates.Dir, 0o700))
	must(t, s.Files.WriteFile(s.Config.CertPath(config.CertCA), ca.Cert, 0o644))
	return ca.Cert
}

// objects dumps the objects the live phases write, keyed "Kind ns/name",
// as JSON without the resourceVersion and the times of managedFields,
// which a real API server leaves alone on a write that changes nothing.
func objects(t *testing.T, client *fake.Clientset) map[string]string {
	t.Helper()
	ctx := context.Background()
	all := map[string]string{}
	add := func(kind string, list runtime.Object, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		data, err := json.Marshal(list)
		if err != nil {
			t.Fatal(err)
		}
		var l struct {
			Items []map[string]any `json:"items"`
		}
		if err := json.Unmarshal(data, &l); err != nil {
			t.Fatal(err)
		}
		for _, item := range l.Items {
			meta := item["metadata"].(map[string]any)
			delete(meta, "resourceVersion")
			if mf, ok := meta["managedFields"].([]any); ok {
				for _, f := range mf {
					delete(f.(map[string]any), "time")
				}
			}
			ns, _ := meta["namespace"].(string)
			data, err := json.Marshal(item)
			if err != nil {
				t.Fatal(err)
			}
			all[kind+" "+ns+"/"+meta["name"].(string)] = string(data)
		}
	}
	opts := metav1.ListOptions{}
	cms, err := client.CoreV1().ConfigMaps("").List(ctx, opts)
	add("ConfigMap", cms, err)
	secrets, err := client.CoreV1().Secrets("").List(ctx, opts)
	add("Secret", secrets, err)
	nodes, err := client.CoreV1().Nodes().List(ctx, opts)
	add("Node", nodes, err)
	roles, err := client.RbacV1().Roles("").List(ctx, opts)
	add("Role", roles, err)
	rbs, err := client.RbacV1().RoleBindings("").List(ctx, opts)
	add("RoleBinding", rbs, err)
	crs, err := client.RbacV1().ClusterRoles().List(ctx, opts)
	add("ClusterRole", crs, err)
	crbs, err := client.RbacV1().ClusterRoleBindings().List(ctx, opts)
	add("ClusterRoleBinding", crbs, err)
	sas, err := client.CoreV1().ServiceAccounts("").List(ctx, opts)
	add("ServiceAccount", sas, err)
	svcs, err := client.CoreV1().Services("").List(ctx, opts)
	add("Service", svcs, err)
	deploys, err := client.AppsV1().Deployments("").List(ctx, opts)
	add("Deployment", deploys, err)
	dss, err := client.AppsV1().DaemonSets("").List(ctx, opts)
	add("DaemonSet", dss, err)
	return all
}

// rerunChangesNothing runs phase again and fails when any object differs.
func rerunChangesNothing(t *testing.T, s *Node, client *fake.Clientset, phase workflow.Phase[*Node]) {
	t.Helper()
	before := objects(t, client)
	if err := phase.Run(context.Background(), s); err != nil {
		t.Fatalf("re-run: %v", err)
	}
	if diff := cmp.Diff(before, objects(t, client)); diff != "" {
		t.Errorf("the re-run of %s changed objects (-before +after):\n%s", phase.Name, diff)
	}
}

func TestBootstrapAdminConverges(t *testing.T) {
	s, client, out := liveState(t, false)
	ctx := context.Background()
	must(t, runBootstrapAdmin(ctx, s))
	for _, want := range adminBindings() {
		have, err := client.RbacV1().ClusterRoleBindings().Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !cmp.Equal(have.RoleRef, want.RoleRef) || !cmp.Equal(have.Subjects, want.Subjects) {
			t.Errorf("binding %s = %+v, want %+v", want.Name, have, want)
		}
	}
	rerunChangesNothing(t, s, client, BootstrapAdmin)

	// Someone changes a subject: the apply takes it back.
	crb, err := client.RbacV1().ClusterRoleBindings().Get(ctx, clusterAdminsGroup, metav1.GetOptions{})
	must(t, err)
	crb.Subjects[0].Name = "someone-else"
	_, err = client.RbacV1().ClusterRoleBindings().Update(ctx, crb, metav1.UpdateOptions{FieldManager: "kubectl-edit"})
	must(t, err)
	// Someone points a binding at another role, which no update can undo.
	crb, err = client.RbacV1().ClusterRoleBindings().Get(ctx, kubeletClientBinding, metav1.GetOptions{})
	must(t, err)
	crb.RoleRef.Name = "view"
	_, err = client.RbacV1().ClusterRoleBindings().Update(ctx, crb, metav1.UpdateOptions{})
	must(t, err)
	out.Reset()
	must(t, runBootstrapAdmin(ctx, s))
	for _, want := range adminBindings() {
		have, err := client.RbacV1().ClusterRoleBindings().Get(ctx, want.Name, metav1.GetOptions{})
		must(t, err)
		if !cmp.Equal(have.RoleRef, want.RoleRef) || !cmp.Equal(have.Subjects, want.Subjects) {
			t.Errorf("after drift, binding %s = %+v %+v", want.Name, have.RoleRef, have.Subjects)
		}
	}
	if !strings.Contains(out.String(), "ClusterRoleBinding "+kubeletClientBinding+" replaced") {
		t.Errorf("a changed roleRef is not reported as replaced:\n%s", out)
	}
}

func TestBootstrapAdminNeedsKubeconfig(t *testing.T) {
	s, _, _ := liveState(t, false)
	s.API = nil
	err := runBootstrapAdmin(context.Background(), s)
	if err == nil || !strings.Contains(err.Error(), "run `kubeboot init phase kubeconfig` first") {
		t.Errorf("want a hint to run the kubeconfig phase, got %v", err)
	}
}

// TestNewClientTalksToTheLocalAPIServer: with a controlPlaneEndpoint, the
// live phases go to this node's API server, not through the load balancer.
func TestNewClientTalksToTheLocalAPIServer(t *testing.T) {
	s, _, _ := liveState(t, false)
	s.API = nil
	s.Config.ControlPlaneEndpoint = "lb.example:443"
	kubeconfig, err := pki.ClusterInfoKubeconfig("https://lb.example:443", writeCA(t, s))
	must(t, err)
	must(t, os.MkdirAll(s.Files.HostPath(s.Config.Paths.KubeconfigDir), 0o700))
	// A kubeconfig needs a context to be used.
	kubeconfig = append(kubeconfig, []byte("contexts:\n- name: c\n  context: {cluster: \"\", user: u}\ncurrent-context: c\nusers:\n- name: u\n  user: {token: t}\n")...)
	must(t, s.Files.WriteFile(s.Config.KubeconfigPath(config.KubeconfigSuperAdmin), kubeconfig, 0o600))
	client, err := APIClient(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := client.RbacV1().RESTClient().Get().URL().Host; got != "10.0.0.10:6443" {
		t.Errorf("the client talks to %s, want this node's API server 10.0.0.10:6443", got)
	}
	if again, _ := APIClient(s); again != client {
		t.Error("the run's client is built once")
	}
	// client-go's default, 5 requests per second, held init's hundred
	// requests back by about 5 s.
	if qps := client.RbacV1().RESTClient().GetRateLimiter().QPS(); qps < 100 {
		t.Errorf("the client sends at most %v requests per second, want 100 or more", qps)
	}
}

// ownedBy is the fields manager owns, as the API server records them; "" if
// it owns none.
func ownedBy(entries []metav1.ManagedFieldsEntry, manager string) string {
	for _, e := range entries {
		if e.Manager == manager && e.FieldsV1 != nil {
			return e.FieldsV1.GetRawString()
		}
	}
	return ""
}

// TestAPIPhasesAreLiveOnly: a dry run and a --root render skip every phase
// that talks to the API server, and so never build a client.
func TestAPIPhasesAreLiveOnly(t *testing.T) {
	api := []workflow.Phase[*Node]{BootstrapAdmin, UploadConfig, UploadCerts, MarkControlPlane, BootstrapToken, ClusterInfo, CSRApprover, AddonCNI, AddonCoreDNS, AddonKubeProxy}
	for _, p := range api {
		if !p.LiveOnly {
			t.Errorf("%s is not LiveOnly", p.Name)
		}
	}
	for _, opts := range []workflow.Options{{DryRun: true}, {Offline: true}} {
		s, _, out := liveState(t, false)
		s.API, s.Options = nil, opts
		ran, err := workflow.Runner[*Node]{Phases: api}.Run(context.Background(), s, nil)
		if err != nil || len(ran) != 0 || s.API != nil || s.JoinCommand != "" {
			t.Errorf("%+v: ran %v, err %v, client built %v\n%s", opts, ran, err, s.API != nil, out)
		}
	}
	names := InitWorkflow.Names()
	if got := strings.Join(names[len(names)-14:], ","); got != "bootstrap-admin,upload-config,upload-certs,mark-control-plane,bootstrap-token,cluster-info,kubelet-finalize,csr-approver,certs-renewal,addon,addon/cni,addon/coredns,addon/kube-proxy,addon/manifests" {
		t.Errorf("init ends with %s", got)
	}
}
