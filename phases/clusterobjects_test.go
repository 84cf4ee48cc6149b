package phases

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/discovery"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/templates"
)

func TestUploadConfig(t *testing.T) {
	s, client, out := liveState(t, false)
	s.Config.Networking.PodSubnet = "10.244.0.0/16"
	s.Config.Kubelet.ExtraConfig = map[string]any{"address": "10.0.0.10", "maxPods": 50}
	ctx := context.Background()
	must(t, runUploadConfig(ctx, s))

	cm, err := client.CoreV1().ConfigMaps("kube-system").Get(ctx, "kubeadm-config", metav1.GetOptions{})
	must(t, err)
	var kubeadm map[string]any
	must(t, yaml.Unmarshal([]byte(cm.Data["ClusterConfiguration"]), &kubeadm))
	if kubeadm["apiVersion"] != "kubeadm.k8s.io/v1beta4" || kubeadm["kubernetesVersion"] != s.Config.KubernetesVersion ||
		kubeadm["networking"].(map[string]any)["podSubnet"] != "10.244.0.0/16" {
		t.Errorf("kubeadm-config holds %v", kubeadm)
	}
	kubelet, err := client.CoreV1().ConfigMaps("kube-system").Get(ctx, "kubelet-config", metav1.GetOptions{})
	must(t, err)
	want, err := ClusterKubeletConfiguration(s.Config)
	must(t, err)
	if diff := cmp.Diff(map[string]string{"kubelet": string(want)}, kubelet.Data); diff != "" {
		t.Errorf("kubelet-config (-want +got):\n%s", diff)
	}
	for _, name := range []string{"kubeadm:nodes-kubeadm-config", "kubeadm:kubelet-config"} {
		role, err := client.RbacV1().Roles("kube-system").Get(ctx, name, metav1.GetOptions{})
		must(t, err)
		binding, err := client.RbacV1().RoleBindings("kube-system").Get(ctx, name, metav1.GetOptions{})
		must(t, err)
		if len(role.Rules) != 1 || role.Rules[0].Verbs[0] != "get" || len(binding.Subjects) != 3 ||
			binding.Subjects[0].Name != "system:bootstrappers:kubeadm:default-node-token" || binding.Subjects[1].Name != "system:bootstrappers:kubeboot:node-bound" ||
			binding.Subjects[2].Name != "system:nodes" {
			t.Errorf("%s: role %+v, binding %+v", name, role.Rules, binding.Subjects)
		}
	}
	for _, line := range []string{"ConfigMap kube-system/kubeadm-config created", "RoleBinding kube-system/kubeadm:kubelet-config created"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("output lacks %q:\n%s", line, out)
		}
	}
	rerunChangesNothing(t, s, client, UploadConfig)
}

// TestClusterInfoIsSignedAtOnce: cluster-info holds, from the start, the
// signatures of init's tokens (generated, or given in the configuration)
// that may sign and have not expired, as the bootstrapsigner would write
// them; none of an expired token, a token that only authenticates, a
// token of `token create` (the signer's alone) or a Secret that is no
// token. A re-run after the bootstrapsigner signed the other token
// changes nothing, and a signature goes once its token does.
func TestClusterInfoIsSignedAtOnce(t *testing.T) {
	tok := func(id string) bootstraptoken.Token { return bootstraptoken.Token{ID: id, Secret: "0123456789abcdef"} }
	now := time.Now()
	valid := bootstraptoken.Secret(bootstraptoken.ForNodes(tok("aaaaaa"), now.Add(time.Hour), "", CreatedByInit))
	given := bootstraptoken.Secret(bootstraptoken.ForNodes(tok("eeeeee"), now.Add(time.Hour), "", CreatedByInitConfig))
	expired := bootstraptoken.Secret(bootstraptoken.ForNodes(tok("bbbbbb"), now.Add(-time.Hour), "", CreatedByInit))
	authOnly := bootstraptoken.ForNodes(tok("cccccc"), now.Add(time.Hour), "", CreatedByInit)
	authOnly.Usages = []string{bootstraptoken.UsageAuthentication}
	created := bootstraptoken.Secret(bootstraptoken.ForNodes(tok("ffffff"), now.Add(time.Hour), "", CreatedByTokenCreate))
	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-dddddd", Namespace: "kube-system"}, Data: map[string][]byte{"token-id": []byte("dddddd"), "token-secret": []byte("0123456789abcdef"), "usage-bootstrap-signing": []byte("true")}}
	s, client, _ := liveState(t, false, valid, given, expired, bootstraptoken.Secret(authOnly), created, other)
	writeCA(t, s)
	ctx := context.Background()
	must(t, runClusterInfo(ctx, s))
	cm, err := client.CoreV1().ConfigMaps("kube-public").Get(ctx, "cluster-info", metav1.GetOptions{})
	must(t, err)
	var keys []string
	for k := range cm.Data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"jws-kubeconfig-aaaaaa", "jws-kubeconfig-eeeeee", "kubeconfig"}) {
		t.Fatalf("cluster-info holds %v, want the kubeconfig and the signatures of init's two valid tokens", keys)
	}
	for _, id := range []string{"aaaaaa", "eeeeee"} {
		if err := discovery.VerifyJWS(cm.Data["jws-kubeconfig-"+id], []byte(cm.Data["kubeconfig"]), tok(id)); err != nil {
			t.Errorf("the signature of %s does not verify: %v", id, err)
		}
	}
	// The bootstrapsigner adds token-create's as its own manager.
	cm.Data["jws-kubeconfig-ffffff"] = discovery.SignJWS([]byte(cm.Data["kubeconfig"]), tok("ffffff"))
	_, err = client.CoreV1().ConfigMaps("kube-public").Update(ctx, cm, metav1.UpdateOptions{FieldManager: "kube-controller-manager"})
	must(t, err)
	rerunChangesNothing(t, s, client, ClusterInfo)
	must(t, client.CoreV1().Secrets("kube-system").Delete(ctx, valid.Name, metav1.DeleteOptions{}))
	must(t, runClusterInfo(ctx, s))
	cm, err = client.CoreV1().ConfigMaps("kube-public").Get(ctx, "cluster-info", metav1.GetOptions{})
	must(t, err)
	if _, ok := cm.Data["jws-kubeconfig-aaaaaa"]; ok || len(cm.Data) != 3 {
		t.Errorf("after token aaaaaa was deleted, cluster-info holds %d keys, its signature among them: %v", len(cm.Data), ok)
	}
}

func TestClusterInfo(t *testing.T) {
	s, client, out := liveState(t, false)
	s.Config.ControlPlaneEndpoint = "lb.example"
	ca := writeCA(t, s)
	ctx := context.Background()
	must(t, runClusterInfo(ctx, s))

	cm, err := client.CoreV1().ConfigMaps("kube-public").Get(ctx, "cluster-info", metav1.GetOptions{})
	must(t, err)
	kubeconfig, err := clientcmd.Load([]byte(cm.Data["kubeconfig"]))
	must(t, err)
	cluster := kubeconfig.Clusters[""]
	if cluster == nil || cluster.Server != "https://lb.example:6443" || string(cluster.CertificateAuthorityData) != string(ca) || len(kubeconfig.AuthInfos) != 0 {
		t.Errorf("cluster-info kubeconfig %+v", kubeconfig)
	}
	binding, err := client.RbacV1().RoleBindings("kube-public").Get(ctx, "kubeadm:bootstrap-signer-clusterinfo", metav1.GetOptions{})
	must(t, err)
	if len(binding.Subjects) != 1 || binding.Subjects[0].Name != "system:anonymous" {
		t.Errorf("cluster-info readers %+v", binding.Subjects)
	}

	// The bootstrapsigner adds its signature as its own manager; a
	// re-run leaves it, and kubeboot owns the kubeconfig key only.
	cm.Data["jws-kubeconfig-abcdef"] = "eyJhbGciOiJIUzI1NiIsImtpZCI6ImFiY2RlZiJ9..sig"
	_, err = client.CoreV1().ConfigMaps("kube-public").Update(ctx, cm, metav1.UpdateOptions{FieldManager: "kube-controller-manager"})
	must(t, err)
	out.Reset()
	rerunChangesNothing(t, s, client, ClusterInfo)
	cm, err = client.CoreV1().ConfigMaps("kube-public").Get(ctx, "cluster-info", metav1.GetOptions{})
	must(t, err)
	if _, ok := cm.Data["jws-kubeconfig-abcdef"]; !ok {
		t.Error("the re-run removed the bootstrapsigner's key")
	}
	if owned := ownedBy(cm.ManagedFields, FieldManager); owned != `{"f:data":{"f:kubeconfig":{}}}` {
		t.Errorf("kubeboot owns %s of cluster-info, want %s", owned, `{"f:data":{"f:kubeconfig":{}}}`)
	}
	if strings.Contains(out.String(), "WARNING") {
		t.Errorf("no manifest, no warning:\n%s", out)
	}
}

// TestClusterInfoWarnsWithoutTheSigner: a controller manager without the
// bootstrapsigner never signs cluster-info, and token discovery fails.
func TestClusterInfoWarnsWithoutTheSigner(t *testing.T) {
	s, _, out := liveState(t, false)
	writeCA(t, s)
	s.Config.ControllerManager.ExtraArgs = []config.Arg{{Name: "controllers", Value: "*,tokencleaner"}}
	pod, err := templates.ControllerManager(s.Config)
	must(t, err)
	manifest, err := templates.Marshal(pod)
	must(t, err)
	must(t, s.Files.MkdirAll(s.Config.Paths.ManifestsDir, 0o700))
	must(t, s.Files.WriteFile(s.Config.ManifestPath(config.NameControllerManager), manifest, 0o600))
	must(t, runClusterInfo(context.Background(), s))
	if !strings.Contains(out.String(), "WARNING: "+s.Config.ManifestPath(config.NameControllerManager)+" runs without bootstrapsigner") {
		t.Errorf("no warning about the bootstrapsigner:\n%s", out)
	}
}

// TestLivePhasesNeedTheirInputs: each names what to run first, before it
// changes anything.
func TestLivePhasesNeedTheirInputs(t *testing.T) {
	for _, p := range []workflow.Phase[*Node]{ClusterInfo, BootstrapToken} {
		s, client, _ := liveState(t, false)
		err := p.Run(context.Background(), s)
		if err == nil || !strings.Contains(err.Error(), "run `kubeboot init phase certs` first") {
			t.Errorf("%s without a CA: %v", p.Name, err)
		}
		if len(objects(t, client)) != 0 {
			t.Errorf("%s without a CA wrote %v", p.Name, objects(t, client))
		}
	}
}
