package controlplane

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubeboot/kubeboot/templates"
)

// TestEtcdEndpointsOfPods: the join finds the members it joins through in
// the etcd pods' annotations, as kubeadm does: every other node's, in
// order, each URL once, never its own nor a pod that is not etcd's.
func TestEtcdEndpointsOfPods(t *testing.T) {
	pod := func(name, node, component, urls string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceSystem,
				Labels:      map[string]string{"component": component, "tier": "control-plane"},
				Annotations: map[string]string{templates.AnnotationEtcdClientURLs: urls}},
			Spec: corev1.PodSpec{NodeName: node},
		}
	}
	client := fake.NewClientset(
		pod("etcd-cp2", "cp2", "etcd", "https://10.0.0.12:2379"),
		pod("etcd-cp1", "cp1", "etcd", "https://10.0.0.11:2379, http://10.0.0.11:2380"),
		pod("etcd-cp1-again", "cp1", "etcd", "https://10.0.0.11:2379"),
		pod("etcd-cp3", "cp3", "etcd", "https://10.0.0.13:2379"),
		pod("kube-apiserver-cp1", "cp1", "kube-apiserver", "https://10.0.0.99:2379"),
	)
	got, err := etcdEndpointsOfPods(context.Background(), client, "cp3")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"https://10.0.0.11:2379", "https://10.0.0.12:2379"}; !slices.Equal(got, want) {
		t.Errorf("endpoints %q, want %q", got, want)
	}
	if got, err := etcdEndpointsOfPods(context.Background(), fake.NewClientset(), "cp3"); err != nil || len(got) != 0 {
		t.Errorf("a cluster without etcd pods: %q, %v", got, err)
	}
}
