package templates

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/staticpod"
)

// TestCSRApproverPod pins what the approver's pod runs and reaches: the
// node's kubeboot binary, mounted read-only, as `kubeboot csr-approver`
// in the configured image (the pause image by default, whose user 65535
// it overrides with root), its kubeconfig as the only other file, probes
// on the loopback health port, the binary's release as an annotation, and
// nothing the kubelet refuses in a static pod (no service account, no
// secret).
func TestCSRApproverPod(t *testing.T) {
	for _, tc := range []struct {
		name, image, bind string
		edit              func(*config.ClusterConfiguration)
	}{
		{"default", "registry.k8s.io/pause:3.10.2", "127.0.0.1", nil},
		{"own image, IPv6", "registry.example/ops/base:v1", "::1", func(c *config.ClusterConfiguration) {
			c.CSRApprover.Image = "registry.example/ops/base:v1"
			c.Node.AdvertiseAddress, c.Networking.ServiceSubnet = "fd00::10", "fd00:10:96::/112"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod, err := CSRApprover(newConfig(tc.edit), testKubeboot)
			if err != nil {
				t.Fatal(err)
			}
			c := pod.Spec.Containers[0]
			want := []string{"/usr/bin/kubeboot", "csr-approver", "--bind-address=" + tc.bind, "--health-port=10270", "--kubeconfig=/etc/kubernetes/csr-approver.conf"}
			if pod.Name != "kubeboot-csr-approver" || c.Image != tc.image || !slices.Equal(c.Command, want) {
				t.Errorf("pod %s runs %s: %q; want kubeboot-csr-approver running %s: %q", pod.Name, c.Image, c.Command, tc.image, want)
			}
			file := corev1.HostPathFile
			wantVolumes := []corev1.Volume{
				{Name: "kubeboot", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/usr/bin/kubeboot", Type: &file}}},
				{Name: "kubeconfig", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc/kubernetes/csr-approver.conf", Type: &file}}},
			}
			if diff := cmp.Diff(wantVolumes, pod.Spec.Volumes); diff != "" {
				t.Errorf("volumes (-want +got):\n%s", diff)
			}
			if len(c.VolumeMounts) != 2 || !c.VolumeMounts[0].ReadOnly || !c.VolumeMounts[1].ReadOnly || c.VolumeMounts[0].MountPath != "/usr/bin/kubeboot" {
				t.Errorf("mounts %+v, want the binary at its path and the kubeconfig, read-only", c.VolumeMounts)
			}
			if sc := c.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 0 || sc.RunAsGroup == nil || *sc.RunAsGroup != 0 {
				t.Errorf("security context %+v, want root: the pause image's user cannot read the kubeconfig", sc)
			}
			if got := pod.Annotations[AnnotationKubebootVersion]; got != "v0.5.0" {
				t.Errorf("annotation %s = %q, want the binary's release v0.5.0", AnnotationKubebootVersion, got)
			}
			if c.Ports[0].ContainerPort != config.PortCSRApprover || !pod.Spec.HostNetwork {
				t.Errorf("port %d, host network %v", c.Ports[0].ContainerPort, pod.Spec.HostNetwork)
			}
			for path, p := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
				want := &corev1.HTTPGetAction{Host: tc.bind, Path: path, Port: intstr.FromString("probe-port"), Scheme: corev1.URISchemeHTTP}
				if p == nil || !cmp.Equal(want, p.HTTPGet) {
					t.Errorf("probe of %s: %+v", path, p)
				}
			}
			data, err := Marshal(pod)
			if err != nil {
				t.Fatal(err)
			}
			if res := staticpod.Validate("kubeboot-csr-approver.yaml", data, "node1"); !res.Accepted || len(res.Warnings) > 0 {
				t.Errorf("the kubelet would refuse it: %v %v", res.Errors, res.Warnings)
			}
		})
	}
}

// TestKubebootPodsFollowTheBinary: a new kubeboot release, or the binary
// at another path, changes the manifests of kubeboot's own pods, so that
// the kubelet restarts them on the new binary; the control plane's stay
// as they are.
func TestKubebootPodsFollowTheBinary(t *testing.T) {
	cfg := newConfig(func(c *config.ClusterConfiguration) {
		c.Etcd.Local = &config.LocalEtcd{ScheduledSnapshots: &config.ScheduledSnapshots{}}
	})
	render := func(kb Kubeboot) map[string]string {
		manifests, err := All(cfg, EtcdMembership{}, kb)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, m := range manifests {
			data, err := Marshal(m.Pod)
			if err != nil {
				t.Fatal(err)
			}
			out[m.Component] = string(data)
		}
		return out
	}
	before := render(testKubeboot)
	for _, kb := range []Kubeboot{{Binary: "/usr/bin/kubeboot", Version: "v0.6.0"}, {Binary: "/usr/local/bin/kubeboot", Version: "v0.5.0"}} {
		after := render(kb)
		for name, data := range before {
			own := slices.Contains(config.KubebootPods, name)
			if changed := after[name] != data; changed != own {
				t.Errorf("%+v: %s changed %v, want %v", kb, name, changed, own)
			}
			if own && !strings.Contains(after[name], "path: "+kb.Binary) {
				t.Errorf("%+v: %s does not mount the binary:\n%s", kb, name, after[name])
			}
		}
	}
}

// TestAllCSRApprover: the approver comes last, and only when enabled.
func TestAllCSRApprover(t *testing.T) {
	off := false
	for _, tc := range []struct {
		name string
		edit func(*config.ClusterConfiguration)
		want bool
	}{
		{"default", nil, true},
		{"disabled", func(c *config.ClusterConfiguration) { c.CSRApprover.Enabled = &off }, false},
		{"kubelet serving certificates unverified", func(c *config.ClusterConfiguration) { c.Security.VerifyKubeletServingCerts = &off }, false},
	} {
		manifests, err := All(newConfig(tc.edit), EtcdMembership{}, testKubeboot)
		if err != nil {
			t.Fatal(err)
		}
		last := manifests[len(manifests)-1].Component
		if got := last == config.NameCSRApprover; got != tc.want {
			t.Errorf("%s: last of %d manifests is %s, want the approver: %v", tc.name, len(manifests), last, tc.want)
		}
	}
	pod, err := CSRApprover(newConfig(nil), testKubeboot)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ApplyPatches(config.NameCSRApprover, pod, []Patch{{File: "p/kubeboot-csr-approver+merge.json", Data: []byte(`{"metadata":{"labels":{"a":"b"}}}`)}}); err != nil {
		t.Errorf("patching the approver: %v", err)
	}
}

// TestCSRApproverRBAC checks what the approver may do: read CSRs and
// Nodes, update approvals, approve for the kubelet-serving and kubelet client signers alone.
func TestCSRApproverRBAC(t *testing.T) {
	objs := CSRApproverRBAC("kubeboot:csr-approver")
	var rules []string
	for _, r := range objs.ClusterRoles[0].Rules {
		rules = append(rules, strings.Join(r.Verbs, ",")+" "+strings.Join(r.APIGroups, ",")+"/"+strings.Join(r.Resources, ",")+" "+strings.Join(r.ResourceNames, ","))
	}
	want := []string{
		"get,list,watch certificates.k8s.io/certificatesigningrequests ",
		"update certificates.k8s.io/certificatesigningrequests/approval ",
		"approve certificates.k8s.io/signers kubernetes.io/kubelet-serving,kubernetes.io/kube-apiserver-client-kubelet",
		"get,list,watch /nodes ",
	}
	if diff := cmp.Diff(want, rules); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}
	b := objs.ClusterRoleBindings[0]
	wantSubjects := []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "kubeboot:csr-approver"}}
	if b.RoleRef.Name != objs.ClusterRoles[0].Name || !cmp.Equal(wantSubjects, b.Subjects) {
		t.Errorf("binding %s: role %s, subjects %+v", b.Name, b.RoleRef.Name, b.Subjects)
	}
}
