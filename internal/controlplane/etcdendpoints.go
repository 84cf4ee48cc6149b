package controlplane

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/templates"
)

// etcdPodSelector selects the etcd static pods' mirror pods, as kubeadm
// labels them.
const etcdPodSelector = "component=" + config.NameEtcd + ",tier=control-plane"

// etcdEndpointsWait bounds how long the join waits for the cluster to show
// its etcd members: the first node's mirror pods appear once its kubelet
// has registered the Node.
const etcdEndpointsWait = 2 * time.Minute

// etcdEndpoints are the client URLs the join adds this node's etcd member
// through: join.etcdEndpoints when given, else those the cluster shows in
// its etcd pods' AnnotationEtcdClientURLs, read with this node's
// admin.conf through the controlPlaneEndpoint, as kubeadm reads them.
func etcdEndpoints(ctx context.Context, s *JoinNode) ([]string, error) {
	if len(s.Join.EtcdEndpoints) > 0 {
		return s.Join.EtcdEndpoints, nil
	}
	path := s.Config.KubeconfigPath(config.KubeconfigAdmin)
	kubeconfig, err := s.Files.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("find the cluster's etcd members: read %q (or list them in join.etcdEndpoints): %w", path, err)
	}
	client, err := phases.NewClient(kubeconfig, "")
	if err != nil {
		return nil, fmt.Errorf("find the cluster's etcd members: load %q: %w", path, err)
	}
	var found []string
	var last error
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, etcdEndpointsWait, true, func(ctx context.Context) (bool, error) {
		found, last = etcdEndpointsOfPods(ctx, client, s.Config.Node.Name)
		return last == nil && len(found) > 0, nil
	})
	if err != nil {
		if last == nil {
			last = fmt.Errorf("no etcd pod in %s has the annotation %s", metav1.NamespaceSystem, templates.AnnotationEtcdClientURLs)
		}
		return nil, fmt.Errorf("find the cluster's etcd members through %s within %s: %w: list them in join.etcdEndpoints, e.g. https://10.0.0.11:2379",
			s.Config.ControlPlaneEndpoint, etcdEndpointsWait, last)
	}
	s.Report.Infof("the cluster's etcd members, from its etcd pods: %s", strings.Join(found, ", "))
	return found, nil
}

// etcdEndpointsOfPods lists the client URLs in the etcd pods' annotations,
// but this node's own (a re-run's), sorted.
func etcdEndpointsOfPods(ctx context.Context, client kubernetes.Interface, self string) ([]string, error) {
	pods, err := client.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: etcdPodSelector})
	if err != nil {
		return nil, fmt.Errorf("list the etcd pods: %w", err)
	}
	var urls []string
	for _, pod := range pods.Items {
		if pod.Spec.NodeName == self {
			continue
		}
		for _, u := range annotatedURLs(pod) {
			if !slices.Contains(urls, u) {
				urls = append(urls, u)
			}
		}
	}
	slices.Sort(urls)
	return urls, nil
}

// annotatedURLs are the https client URLs of a pod's annotation, which may
// list several, comma-separated.
func annotatedURLs(pod corev1.Pod) []string {
	var urls []string
	for _, u := range strings.Split(pod.Annotations[templates.AnnotationEtcdClientURLs], ",") {
		if u = strings.TrimSpace(u); strings.HasPrefix(u, "https://") {
			urls = append(urls, u)
		}
	}
	return urls
}
