package staticpod

import (
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testNode is the node name the tests validate for.
const testNode = "node-1"

// validPod returns a small pod that ValidatePod accepts, with one container
// of each kind a static pod may have, so that cases can break one thing.
func validPod() *corev1.Pod {
	always := corev1.ContainerRestartPolicyAlways
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver", Namespace: "kube-system"},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{
				{Name: "init", Image: "registry.k8s.io/pause:3.10"},
				{Name: "sidecar", Image: "registry.k8s.io/pause:3.10", RestartPolicy: &always},
			},
			Containers: []corev1.Container{
				{Name: "kube-apiserver", Image: "registry.k8s.io/kube-apiserver:v1.36.3"},
			},
		},
	}
}

// withVolume returns a mutation that adds a volume named "v" with source.
func withVolume(source corev1.VolumeSource) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "v", VolumeSource: source})
	}
}

// withEphemeral adds an ephemeral container to p and returns it.
func withEphemeral(p *corev1.Pod) *corev1.EphemeralContainerCommon {
	p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox"},
	})
	return &p.Spec.EphemeralContainers[len(p.Spec.EphemeralContainers)-1].EphemeralContainerCommon
}

// ephemeralForbidden is the finding that any ephemeral container causes.
var ephemeralForbidden = Finding{
	Field:   "spec.ephemeralContainers",
	Message: "forbidden: ephemeral containers may not be set when a pod is created, and the kubelet creates static pods",
}

// readAPIServerManifest returns testdata/kube-apiserver.yaml, a realistic
// manifest rendered by kubeboot.
func readAPIServerManifest(t testing.TB) []byte {
	t.Helper()
	data, err := os.ReadFile("testdata/kube-apiserver.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return data
}
