package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/discovery"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/pki"
	"github.com/kubeboot/kubeboot/templates"
)

// Node is the data of a worker's join: the run, the worker's
// configuration and, once a phase needed it, the cluster discovered. It
// holds no ClusterConfiguration, so nothing can render a control plane
// from it.
type Node struct {
	*workflow.Run
	// Config is the worker's configuration as config.Load returned it:
	// read-only.
	Config *config.WorkerConfiguration
	// Discovered is the cluster this node joins: nil until the first
	// phase that needs it discovers it (discovered).
	Discovered *discovery.Cluster
	// KubeletClient builds a client from the kubelet's kubeconfig at a
	// host path, whose client certificate is a file of the kubelet's; it
	// fails until both exist. NewNode's is client-go's; tests give
	// a fake.
	KubeletClient func(hostPath string) (kubernetes.Interface, error)
}

// NewNode is the data of a worker's join of w in run.
func NewNode(run *workflow.Run, w *config.WorkerConfiguration) *Node {
	return &Node{Run: run, Config: w, KubeletClient: kubeletClient}
}

// JoinWorkflow is the `kubeboot join` workflow of a worker node, in
// dependency order, with kubeadm's phase names where kubeadm has the
// phase. The phases that need the cluster discover it once per run
// (Node.Discovered) and talk to it with the bootstrap token
// (Run.API); the others read what the earlier ones wrote to disk.
var JoinWorkflow = workflow.Runner[*Node]{Phases: []workflow.Phase[*Node]{
	Preflight, KubeletConfig, BootstrapKubeconfig, phases.KubeletStart(Kubelet), KubeletWaitBootstrap,
}}

// KubeletConfig writes the kubelet's configuration: the cluster's,
// from kube-system/kubelet-config, with this node's settings over it.
var KubeletConfig = workflow.Phase[*Node]{
	Name:  "kubelet-config",
	Short: "Write the kubelet's configuration: the cluster's kube-system/kubelet-config with this node's settings, and its empty static pod path",
	Run:   runKubeletConfig,
}

// BootstrapKubeconfig writes what the kubelet's TLS bootstrap starts from:
// the cluster CA, and bootstrap-kubelet.conf with the CA, the server and
// the bootstrap token. On a node whose kubelet holds its own client
// certificate of this cluster, it writes no bootstrap-kubelet.conf.
var BootstrapKubeconfig = workflow.Phase[*Node]{
	Name:  "bootstrap-kubeconfig",
	Short: "Write the cluster CA and bootstrap-kubelet.conf (the CA, the server and the bootstrap token) for the kubelet's TLS bootstrap",
	Run:   runBootstrapKubeconfig,
}

// discovered is the cluster this node joins: discovered on first use in a
// run, and kept in Node.Discovered.
func discovered(ctx context.Context, s *Node) (*discovery.Cluster, error) {
	if s.Discovered != nil {
		return s.Discovered, nil
	}
	w := s.Config
	c, err := phases.Discover(ctx, s.Run, w.Discovery, w.Timeouts.Discovery.Duration)
	if err != nil {
		return nil, err
	}
	s.Discovered = c
	return c, nil
}

// tokenClient is the run's API client with the bootstrap token's identity,
// which kubeadm's RBAC lets get Nodes and read the kubelet's configuration.
func tokenClient(ctx context.Context, s *Node) (kubernetes.Interface, error) {
	if s.API != nil {
		return s.API, nil
	}
	c, err := discovered(ctx, s)
	if err != nil {
		return nil, err
	}
	kubeconfig, err := phases.BootstrapKubeconfig(c)
	if err != nil {
		return nil, err
	}
	client, err := phases.NewClient(kubeconfig, "")
	if err != nil {
		return nil, fmt.Errorf("build the API client of token %s: %w", c.Token.ID, err)
	}
	s.API = client
	return client, nil
}

func runKubeletConfig(ctx context.Context, s *Node) error {
	w := s.Config
	client, err := tokenClient(ctx, s)
	if err != nil {
		return err
	}
	name := metav1.NamespaceSystem + "/" + templates.KubeletConfigName
	cm, err := client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, templates.KubeletConfigName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("get ConfigMap %q: not found: run `kubeboot init phase upload-config` on a control-plane node", name)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("get ConfigMap %q: %w: `kubeboot init phase upload-config` on a control-plane node lets bootstrap tokens read it", name, err)
	case err != nil:
		return fmt.Errorf("get ConfigMap %q: %w", name, err)
	}
	data, ok := cm.Data[templates.KubeletConfigKey]
	if !ok {
		return fmt.Errorf("read ConfigMap %q: no %q key", name, templates.KubeletConfigKey)
	}
	rendered, err := NodeKubeletConfiguration([]byte(data), w)
	if err != nil {
		return fmt.Errorf("read ConfigMap %q: %w", name, err)
	}
	if err := s.Files.WriteFile(w.Kubelet.ConfigFile, rendered, 0o600); err != nil {
		return err
	}
	s.Report.Infof("%s holds the KubeletConfiguration of %s with this node's settings", w.Kubelet.ConfigFile, name)
	// The kubelet watches its static pod path and, while it is missing,
	// logs an error every second; a worker runs no static pod, so it is
	// empty, as the one a kubelet package installs.
	return s.Files.MkdirAll(w.Paths.ManifestsDir, phases.ManifestDirMode)
}

// NodeKubeletConfiguration is the KubeletConfiguration of a joining worker:
// the cluster's (cluster, as kube-system/kubelet-config holds it), then
// this node's settings (its CRI socket and static pod path; the cluster CA
// it writes, for authenticating clients; serverTLSBootstrap, so that the
// kubelet asks the cluster CA for its serving certificate, and
// rotateCertificates; node.taints as registerWithTaints, when it has
// some), then the node's kubelet.extraConfig, each as a JSON merge patch
// over what came before.
func NodeKubeletConfiguration(cluster []byte, w *config.WorkerConfiguration) ([]byte, error) {
	data, err := yaml.YAMLToJSON(cluster)
	if err != nil {
		return nil, fmt.Errorf("parse KubeletConfiguration: %w", err)
	}
	var meta metav1.TypeMeta
	if err := json.Unmarshal(data, &meta); err != nil || meta.Kind != "KubeletConfiguration" || meta.APIVersion != "kubelet.config.k8s.io/v1beta1" {
		return nil, errors.New("not a kubelet.config.k8s.io/v1beta1 KubeletConfiguration")
	}
	node := map[string]any{
		"containerRuntimeEndpoint": w.Kubelet.ContainerRuntimeEndpoint,
		"staticPodPath":            w.Paths.ManifestsDir,
		"authentication":           map[string]any{"x509": map[string]any{"clientCAFile": w.CAPath()}},
		"serverTLSBootstrap":       true,
		"rotateCertificates":       true,
	}
	if taints := config.CoreTaints(w.Node.Taints); taints != nil {
		node["registerWithTaints"] = taints
	}
	for _, patch := range []map[string]any{node, w.Kubelet.ExtraConfig} {
		if len(patch) == 0 {
			continue
		}
		raw, err := json.Marshal(patch)
		if err != nil {
			return nil, fmt.Errorf("encode this node's kubelet settings: %w", err)
		}
		if data, err = jsonpatch.MergePatch(data, raw); err != nil {
			return nil, fmt.Errorf("apply this node's kubelet settings: %w", err)
		}
	}
	return yaml.JSONToYAML(data)
}

func runBootstrapKubeconfig(ctx context.Context, s *Node) error {
	w := s.Config
	c, err := discovered(ctx, s)
	if err != nil {
		return err
	}
	if err := checkClusterCA(s, w, c); err != nil {
		return err
	}
	if err := s.Files.MkdirAll(w.Certificates.Dir, pki.ModeDir); err != nil {
		return err
	}
	if err := s.Files.WriteFile(w.CAPath(), c.CA, pki.ModeCert); err != nil {
		return err
	}
	path := w.KubeconfigPath(config.KubeconfigBootstrapKubelet)
	if own, _ := readKubeletConf(s, w); own.joined(w, c) {
		s.Report.Infof("%s holds this node's client certificate of the cluster (valid until %s): the kubelet needs no %s",
			w.KubeconfigPath(config.KubeconfigKubelet), own.expires.Format("2006-01-02"), path)
		return nil
	}
	data, err := phases.BootstrapKubeconfig(c)
	if err != nil {
		return err
	}
	if err := s.Files.WriteFile(path, data, 0o600); err != nil {
		return err
	}
	s.Report.Infof("%s (mode 0600) holds token %s for the kubelet's TLS bootstrap at %s", path, c.Token.ID, c.Server)
	return nil
}
