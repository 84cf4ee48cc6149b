package config

import (
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubeletapis "k8s.io/kubelet/pkg/apis"
)

// A node's labels and taints (node.labels, node.taints) are what its Node
// is registered with, as kubeadm's nodeRegistration's kubeletExtraArgs
// node-labels and taints.

// NodeTaint is a taint of this node's Node.
type NodeTaint struct {
	// Key is the taint's key, a qualified name as a label's key.
	Key string `json:"key"`
	// Value is the taint's value, as a label's value; it may be empty.
	Value string `json:"value,omitempty"`
	// Effect is NoSchedule, PreferNoSchedule or NoExecute.
	Effect corev1.TaintEffect `json:"effect"`
}

// taintEffects are the effects a Node's taint may have.
var taintEffects = []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute}

// NodeLabelsFlag is the value of the kubelet's --node-labels flag for
// labels: key=value pairs, sorted by key and joined by commas, or "" when
// there are none. Neither a label's key nor its value may hold a comma.
func NodeLabelsFlag(labels map[string]string) string {
	pairs := make([]string, 0, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		pairs = append(pairs, k+"="+labels[k])
	}
	return strings.Join(pairs, ",")
}

// CoreTaints are taints as a Node's spec holds them; nil when there are
// none.
func CoreTaints(taints []NodeTaint) []corev1.Taint {
	var core []corev1.Taint
	for _, t := range taints {
		core = append(core, corev1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
	}
	return core
}

// validateNodeRegistration checks the labels and taints of the node
// section at p, as the kubelet's --node-labels and the API server's Node
// validation would, and refuses the labels the kubelet may not set on
// its own Node, each with its fix.
func validateNodeRegistration(p *field.Path, labelMap map[string]string, taintList []NodeTaint) field.ErrorList {
	var errs field.ErrorList
	labels := p.Child("labels")
	for _, k := range slices.Sorted(maps.Keys(labelMap)) {
		kp := labels.Key(k)
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			errs = append(errs, field.Invalid(kp, k, "not a label key: "+strings.Join(msgs, "; ")))
		} else if isKubernetesLabel(k) && !kubeletapis.IsKubeletLabel(k) {
			errs = append(errs, field.Forbidden(kp, "the kubelet may set no label under kubernetes.io or k8s.io on its own Node but those under "+
				strings.Join(kubeletapis.KubeletLabelNamespaces(), ", ")+" and "+strings.Join(kubeletapis.KubeletLabels(), ", ")+
				" (it refuses --node-labels with it, and the NodeRestriction admission plugin forbids it): use a prefix of your own, such as example.com/role, or set it with `kubectl label node` after the join"))
		}
		if msgs := validation.IsValidLabelValue(labelMap[k]); len(msgs) > 0 {
			errs = append(errs, field.Invalid(kp, labelMap[k], "not a label value: "+strings.Join(msgs, "; ")))
		}
	}
	taints := p.Child("taints")
	seen := map[NodeTaint]bool{}
	for i, t := range taintList {
		tp := taints.Index(i)
		if t.Key == "" {
			errs = append(errs, field.Required(tp.Child("key"), "a taint's key, such as example.com/dedicated"))
		} else if msgs := validation.IsQualifiedName(t.Key); len(msgs) > 0 {
			errs = append(errs, field.Invalid(tp.Child("key"), t.Key, "not a taint key: "+strings.Join(msgs, "; ")))
		}
		if msgs := validation.IsValidLabelValue(t.Value); len(msgs) > 0 {
			errs = append(errs, field.Invalid(tp.Child("value"), t.Value, "not a taint value: "+strings.Join(msgs, "; ")))
		}
		if !slices.Contains(taintEffects, t.Effect) {
			errs = append(errs, field.NotSupported(tp.Child("effect"), t.Effect, taintEffects))
		}
		id := NodeTaint{Key: t.Key, Effect: t.Effect}
		if seen[id] {
			errs = append(errs, field.Invalid(tp, t.Key+":"+string(t.Effect), "listed twice: a Node has one taint of a key and effect; keep one"))
		}
		seen[id] = true
	}
	return errs
}

// isKubernetesLabel says whether a label key is under kubernetes.io or
// k8s.io, as the kubelet's check of --node-labels decides it.
func isKubernetesLabel(key string) bool {
	namespace, _, ok := strings.Cut(key, "/")
	if !ok {
		return false
	}
	for _, ns := range []string{"kubernetes.io", "k8s.io"} {
		if namespace == ns || strings.HasSuffix(namespace, "."+ns) {
			return true
		}
	}
	return false
}

// registerWithTaintsTwice refuses taints given both in the node section
// and as the kubelet's registerWithTaints in kubelet.extraConfig at extra:
// the node section's are the kubelet's then.
func registerWithTaintsTwice(taints []NodeTaint, extra *field.Path, config map[string]any) field.ErrorList {
	if _, ok := config["registerWithTaints"]; !ok || len(taints) == 0 {
		return nil
	}
	return field.ErrorList{field.Forbidden(extra.Child("registerWithTaints"), "node.taints are the kubelet's registerWithTaints: list every taint there and remove this one")}
}

// controlPlaneTaintKey is the key of the taint node.controlPlaneTaint
// sets, as templates.ControlPlaneTaint has it.
const controlPlaneTaintKey = "node-role.kubernetes.io/control-plane"

// validateControlPlaneRegistration checks a control-plane node's labels
// and taints as a worker's, and refuses the control-plane taint in
// node.taints when node.controlPlaneTaint takes it off.
func validateControlPlaneRegistration(c *ClusterConfiguration) field.ErrorList {
	p := field.NewPath("node")
	errs := validateNodeRegistration(p, c.Node.Labels, c.Node.Taints)
	errs = append(errs, registerWithTaintsTwice(c.Node.Taints, field.NewPath("kubelet", "extraConfig"), c.Kubelet.ExtraConfig)...)
	if On(c.Node.ControlPlaneTaint) {
		return errs
	}
	for i, t := range c.Node.Taints {
		if t.Key == controlPlaneTaintKey && t.Effect == corev1.TaintEffectNoSchedule {
			errs = append(errs, field.Forbidden(p.Child("taints").Index(i), "node.controlPlaneTaint is false, which takes this taint off: remove it here, or leave node.controlPlaneTaint on"))
		}
	}
	return errs
}

// NodeIPFlag is the value of the kubelet's --node-ip flag for a node's
// address and its secondary one: the address alone, or both joined by a
// comma, the address first, as a dual-stack kubelet takes them.
func NodeIPFlag(address, secondary string) string {
	if secondary == "" {
		return address
	}
	return address + "," + secondary
}
