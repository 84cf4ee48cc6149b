package podvalidation

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	podutil "k8s.io/kubernetes/pkg/api/pod"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/apis/core/helper"
	_ "k8s.io/kubernetes/pkg/apis/core/install" // registers the core API in legacyscheme, as the kubelet does
	k8sv1 "k8s.io/kubernetes/pkg/apis/core/v1"
	"k8s.io/kubernetes/pkg/apis/core/validation"
)

// kubeletVerdict decides a static pod manifest as the v1.36 kubelet's file
// source does (pkg/kubelet/config: tryDecodeSinglePod with the file
// source's applyDefaults): YAML to JSON, decoding with defaulting into the
// internal type, the name check, the file source's defaults, pod-create
// validation with the options the kubelet derives, conversion back to v1,
// and the API-reference rule. It returns nil when the kubelet would run
// the pod. Only the pod's UID differs from the kubelet's: the kubelet
// hashes the file, which validation does not look at.
func kubeletVerdict(data []byte, nodeName string) error {
	js, err := utilyaml.ToJSON(data)
	if err != nil {
		return err
	}
	obj, err := runtime.Decode(legacyscheme.Codecs.UniversalDecoder(), js)
	if err != nil {
		return err
	}
	pod, ok := obj.(*api.Pod)
	if !ok {
		return fmt.Errorf("invalid pod: %T", obj)
	}
	if pod.Name == "" {
		return fmt.Errorf("invalid pod: name is needed for the pod")
	}
	applyFileDefaults(pod, nodeName)
	opts := podutil.GetValidationOptionsFromPodSpecAndMeta(&pod.Spec, nil, &pod.ObjectMeta, nil)
	if errs := validation.ValidatePodCreate(pod, opts); len(errs) > 0 {
		return fmt.Errorf("invalid pod: %v", errs)
	}
	if err := k8sv1.Convert_core_Pod_To_v1_Pod(pod, &v1.Pod{}, nil); err != nil {
		return err
	}
	_, resource, err := podutil.HasAPIObjectReference(pod)
	if err != nil {
		return err
	}
	if resource != "" {
		return fmt.Errorf("static pods may not reference %s", resource)
	}
	return nil
}

// applyFileDefaults does what the kubelet's applyDefaults does to a pod
// read from a file, with a fixed UID.
func applyFileDefaults(pod *api.Pod, nodeName string) {
	if pod.UID == "" {
		pod.UID = "0123456789abcdef0123456789abcdef"
	}
	pod.Name = pod.Name + "-" + strings.ToLower(nodeName)
	if pod.Namespace == "" {
		pod.Namespace = metav1.NamespaceDefault
	}
	pod.Spec.NodeName = nodeName
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations["kubernetes.io/config.hash"] = string(pod.UID)
	helper.AddOrUpdateTolerationInPod(pod, &api.Toleration{Operator: "Exists", Effect: api.TaintEffectNoExecute})
	pod.Status.Phase = api.PodPending
}
