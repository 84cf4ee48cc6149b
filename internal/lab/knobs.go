package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/output"
)

// featureGateName is how Kubernetes names its feature gates.
var featureGateName = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)

// runtimeConfigKey is a key of --runtime-config: api/all, api/alpha, ...,
// a group/version or a group/version/resource.
var runtimeConfigKey = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]*(/[a-z0-9][a-z0-9.-]*){1,2}$`)

// reservedPaths are where a node's extra mount may not go: its root, its
// kernel file systems, and what the lab lays out itself.
var reservedPaths = []string{"/usr", "/proc", "/sys", "/dev", "/opt/cni/bin", machinePackage}

// validateKnobs names the field and the fix of every problem of the
// cluster's feature gates, runtime config, patch, images, port mappings
// and nodes' extra mounts.
func (c *Cluster) validateKnobs() []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s: %s", c.source, field, fmt.Sprintf(format, args...)))
	}
	for _, name := range slices.Sorted(maps.Keys(c.FeatureGates)) {
		if !featureGateName.MatchString(name) {
			bad("featureGates", "%q: want a feature gate's name, like InPlacePodVerticalScaling", name)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(c.RuntimeConfig)) {
		if !runtimeConfigKey.MatchString(key) {
			bad("runtimeConfig", "%q: want api/all, api/alpha, api/beta or an API group's version, like storage.k8s.io/v1beta1", key)
		}
		if v := c.RuntimeConfig[key]; v != "true" && v != "false" {
			bad("runtimeConfig."+key, "%q: want \"true\" or \"false\"", v)
		}
	}
	if len(c.ClusterConfigurationPatch) > 0 && len(c.Nodes) > 0 && c.Nodes[0].Init == JoinKubeadm {
		bad("clusterConfigurationPatch", "it patches kubeboot's configuration, and kubeadm inits this lab (nodes[0].init): remove one of them")
	}
	for _, key := range []string{"apiVersion", "kind"} {
		if _, ok := c.ClusterConfigurationPatch[key]; ok {
			bad("clusterConfigurationPatch."+key, "the lab sets it: remove it from the patch")
		}
	}
	for i, ref := range c.Images {
		if _, err := name.ParseReference(ref, name.WithDefaultRegistry("")); err != nil || ref == "" {
			bad(fmt.Sprintf("images[%d]", i), "%q: want an image reference with its tag, like docker.io/cloudnativelabs/kube-router:v2.1.0", ref)
		}
	}
	mapped := map[int]bool{}
	for i, p := range c.PortMappings {
		field := fmt.Sprintf("portMappings[%d]", i)
		switch {
		case p.HostPort < 1 || p.HostPort > 65535:
			bad(field+".hostPort", "%d: want a port of this host's loopback, 1 to 65535", p.HostPort)
		case mapped[p.HostPort]:
			bad(field+".hostPort", "%d is mapped twice: give each mapping a hostPort of its own", p.HostPort)
		}
		mapped[p.HostPort] = true
		if p.NodePort < 30000 || p.NodePort > 32767 {
			bad(field+".nodePort", "%d: want a NodePort, 30000 to 32767", p.NodePort)
		}
	}
	for i, n := range c.Nodes {
		for j, m := range n.ExtraMounts {
			field := fmt.Sprintf("nodes[%d].extraMounts[%d]", i, j)
			for _, p := range []struct{ name, path string }{{"hostPath", m.HostPath}, {"containerPath", m.ContainerPath}} {
				if !filepath.IsAbs(p.path) || filepath.Clean(p.path) != p.path || strings.Contains(p.path, ":") {
					bad(field+"."+p.name, "%q: want a clean absolute path without ':', like /srv/data", p.path)
				}
			}
			for _, r := range append([]string{"/"}, reservedPaths...) {
				if m.ContainerPath == r || (r != "/" && strings.HasPrefix(m.ContainerPath, r+"/")) {
					bad(field+".containerPath", "%q: %s is the node's own: mount somewhere else, like /srv/data", m.ContainerPath, r)
				}
			}
		}
	}
	return errs
}

// checkHostPaths refuses extra mounts whose host path is missing, before
// anything is set up.
func (c *Cluster) checkHostPaths() error {
	var errs []error
	for i, n := range c.Nodes {
		for j, m := range n.ExtraMounts {
			if _, err := os.Stat(m.HostPath); err != nil {
				errs = append(errs, fmt.Errorf("%s: nodes[%d].extraMounts[%d].hostPath: %w: create it, or mount another path", c.source, i, j, err))
			}
		}
	}
	return errors.Join(errs...)
}

// checkFeatureGates refuses feature gates that the control plane's
// release does not know, or will not set as asked (a gate locked to its
// default), before anything is set up: its kube-apiserver, from the bin
// dir (v<major>.<minor>/ for another release than its own), parses them
// with --version, as every component shares the release's gates. A
// component would otherwise fail at its start, and the lab with it much
// later.
func (c *Cluster) checkFeatureGates(ctx context.Context, binDir string) error {
	if len(c.FeatureGates) == 0 {
		return nil
	}
	apiServer := filepath.Join(binDir, "kube-apiserver")
	if dir := minorDir(c.KubernetesVersion); dir != "" {
		if _, err := os.Stat(filepath.Join(binDir, dir, "kube-apiserver")); err == nil {
			apiServer = filepath.Join(binDir, dir, "kube-apiserver")
		}
	}
	out, err := exec.CommandContext(ctx, apiServer, "--feature-gates="+listFlag(c.FeatureGates), "--version").CombinedOutput()
	if err == nil {
		return nil
	}
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		return fmt.Errorf("check the feature gates with %s: %w", apiServer, err)
	}
	reason := output.LastLines(string(out), 1)
	if _, after, ok := strings.Cut(reason, "err="); ok {
		reason = strings.Trim(after, `"`)
	}
	return &InputError{Err: fmt.Errorf("%s: featureGates: %s (%s): fix the gate's name, or remove it", c.source, reason, apiServer)}
}

// mounts are the node's extra mounts as a machine's binds: read-only and
// read-write, each as "host:inside".
func (n ClusterNode) mounts() (readOnly, readWrite []string) {
	for _, m := range n.ExtraMounts {
		bind := m.HostPath + ":" + m.ContainerPath
		if m.ReadOnly {
			readOnly = append(readOnly, bind)
		} else {
			readWrite = append(readWrite, bind)
		}
	}
	return readOnly, readWrite
}

// listFlag is a map as a component's list flag: k=v pairs, sorted by key.
func listFlag[V any](m map[string]V) string {
	var pairs []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		pairs = append(pairs, fmt.Sprintf("%s=%v", k, m[k]))
	}
	return strings.Join(pairs, ",")
}

// componentArgs are the extraArgs, in kubeboot's and kubeadm's shape, that
// carry the cluster's feature gates to a control-plane component, and its
// runtime config to the API server; nil for none.
func (c *Cluster) componentArgs(apiServer bool) []any {
	var args []any
	if len(c.FeatureGates) > 0 {
		args = append(args, map[string]any{"name": "feature-gates", "value": listFlag(c.FeatureGates)})
	}
	if apiServer && len(c.RuntimeConfig) > 0 {
		args = append(args, map[string]any{"name": "runtime-config", "value": listFlag(c.RuntimeConfig)})
	}
	return args
}

// setComponentArgs sets the control-plane components' extraArgs of doc, a
// ClusterConfiguration (kubeboot's or kubeadm's), to componentArgs.
func (c *Cluster) setComponentArgs(doc map[string]any) {
	for _, component := range []string{"apiServer", "controllerManager", "scheduler"} {
		if args := c.componentArgs(component == "apiServer"); args != nil {
			doc[component] = map[string]any{"extraArgs": args}
		}
	}
}

// withFeatureGates is a kubelet's or kube-proxy's configuration with the
// cluster's feature gates.
func (c *Cluster) withFeatureGates(cfg map[string]any) map[string]any {
	cfg = maps.Clone(cfg)
	if len(c.FeatureGates) > 0 {
		cfg["featureGates"] = maps.Clone(c.FeatureGates)
	}
	return cfg
}

// controlPlanePatch is every control-plane node's patch over the file the
// fleet writes it: its taint (untainted in a lab without workers, so that
// pods run on it) and the cluster's ClusterConfigurationPatch, nulls kept.
func (c *Cluster) controlPlanePatch() (map[string]any, error) {
	taint := map[string]any{"node": map[string]any{"controlPlaneTaint": c.hasWorkers()}}
	if len(c.ClusterConfigurationPatch) == 0 {
		return taint, nil
	}
	first, err := json.Marshal(taint)
	if err != nil {
		return nil, err
	}
	patch, err := json.Marshal(c.ClusterConfigurationPatch)
	if err != nil {
		return nil, fmt.Errorf("%s: clusterConfigurationPatch: %w", c.source, err)
	}
	merged, err := jsonpatch.MergeMergePatches(first, patch)
	if err != nil {
		return nil, fmt.Errorf("%s: clusterConfigurationPatch: %w", c.source, err)
	}
	out := map[string]any{}
	return out, json.Unmarshal(merged, &out)
}

// ownPodNetwork says whether the clusterConfigurationPatch sets
// addons.cni.provider none: the pod network is then the user's own, from
// addons.manifests, and kubeboot's flannel and NetworkPolicy enforcer are
// not installed.
func (c *Cluster) ownPodNetwork() bool {
	addons, _ := c.ClusterConfigurationPatch["addons"].(map[string]any)
	cni, _ := addons["cni"].(map[string]any)
	return cni["provider"] == config.CNINone
}

// addonRollouts are the addons whose rollout Up waits for, in
// kube-system: kubeboot's pod network and NetworkPolicy enforcer unless
// the pod network is the user's own, then CoreDNS and kube-proxy.
func (c *Cluster) addonRollouts() []string {
	rollouts := []string{"daemonset/kube-flannel", "daemonset/kubeboot-network-policy"}
	if c.ownPodNetwork() {
		rollouts = nil
	}
	return append(rollouts, "deployment/coredns", "daemonset/kube-proxy")
}
