package discovery

import (
	"context"
	"fmt"
	"net/url"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/templates"
)

// Published is the cluster as it publishes itself to joining nodes, read
// with an administrator's client from any machine: cluster-info's server
// (the controlPlaneEndpoint) and CA, and the name kube-system's
// kubeadm-config gives it (config.DefaultClusterName without one).
func Published(ctx context.Context, client kubernetes.Interface) (*Cluster, error) {
	info, err := client.CoreV1().ConfigMaps(templates.ClusterInfoNamespace).Get(ctx, templates.ClusterInfoName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read %s/%s, which tells joining nodes where the cluster is: %w", templates.ClusterInfoNamespace, templates.ClusterInfoName, err)
	}
	c, err := parseClusterInfo([]byte(info.Data[templates.ClusterInfoKey]))
	if err != nil {
		return nil, err
	}
	kubeadm, err := client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, templates.KubeadmConfigName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return c, nil
	case err != nil:
		return nil, fmt.Errorf("read %s/%s: %w", metav1.NamespaceSystem, templates.KubeadmConfigName, err)
	}
	var stored struct {
		ClusterName string `json:"clusterName"`
	}
	if err := yaml.Unmarshal([]byte(kubeadm.Data[templates.KubeadmConfigKey]), &stored); err != nil {
		return nil, fmt.Errorf("read %s/%s: its %s: %w", metav1.NamespaceSystem, templates.KubeadmConfigName, templates.KubeadmConfigKey, err)
	}
	if stored.ClusterName != "" {
		c.Name = stored.ClusterName
	}
	return c, nil
}

// Endpoint is the host:port of the cluster's Server.
func (c *Cluster) Endpoint() string {
	u, err := url.Parse(c.Server)
	if err != nil {
		return c.Server
	}
	return u.Host
}
