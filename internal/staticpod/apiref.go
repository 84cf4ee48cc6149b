package staticpod

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The API-reference rule (feature PreventStaticPodAPIReferences, on by
// default since Kubernetes 1.34): the kubelet runs a static pod before, and
// without, the API server, so the pod may not reference any API object.
//
// The tables below map the JSON name of each field of a "one of" struct to
// the resource it references, worded as the kubelet words it in "static
// pods may not reference <resource>", or to "" when it references none.
// A set field that a table does not list is denied: when Kubernetes adds a
// volume type, it is rejected until someone reviews it and adds it here.

// volumeTypes covers corev1.VolumeSource. "projected" is checked source by
// source, with projectedSources.
var volumeTypes = map[string]string{
	// These read the node or a storage system outside the API. Those of
	// them that can name a Secret are covered by volumeSecretRefs.
	"awsElasticBlockStore": "", "azureDisk": "", "cephfs": "", "cinder": "",
	"downwardAPI": "", "emptyDir": "", "fc": "", "flexVolume": "", "flocker": "",
	"gcePersistentDisk": "", "gitRepo": "", "hostPath": "", "image": "",
	"iscsi": "", "nfs": "", "photonPersistentDisk": "", "portworxVolume": "",
	"quobyte": "", "rbd": "", "scaleIO": "", "storageos": "", "vsphereVolume": "",
	"projected": "",

	"configMap":             "configmaps (via configmap volumes)",
	"secret":                "secrets (via secret volumes)",
	"csi":                   "csidrivers (via CSI volumes)",
	"glusterfs":             "endpoints (via glusterFS volumes)",
	"persistentVolumeClaim": "persistentvolumeclaims",
	"ephemeral":             "persistentvolumeclaims (via ephemeral volumes)",
	"azureFile":             "secrets (via azureFile volumes)",
}

// projectedSources covers corev1.VolumeProjection.
var projectedSources = map[string]string{
	"downwardAPI":         "",
	"configMap":           "configmaps (via projected volumes)",
	"secret":              "secrets (via projected volumes)",
	"serviceAccountToken": "serviceaccounts (via projected volumes)",
	"clusterTrustBundle":  "clustertrustbundles",
	"podCertificate":      "podcertificates",
}

// envSources covers corev1.EnvVarSource; fileKeyRef reads a file in one of
// the pod's emptyDir volumes.
var envSources = map[string]string{
	"fieldRef": "", "resourceFieldRef": "", "fileKeyRef": "",
	"configMapKeyRef": "configmaps",
	"secretKeyRef":    "secrets",
}

// envFromSources covers corev1.EnvFromSource.
var envFromSources = map[string]string{
	"configMapRef": "configmaps",
	"secretRef":    "secrets",
}

// volumeSecretRefs lists the volume types that the kubelet allows but that
// can name a Secret, each with the field that names it.
var volumeSecretRefs = []struct {
	volumeType, field string
	has               func(*corev1.VolumeSource) bool
}{
	{"cephfs", "secretRef", func(s *corev1.VolumeSource) bool { return s.CephFS != nil && s.CephFS.SecretRef != nil }},
	{"cinder", "secretRef", func(s *corev1.VolumeSource) bool { return s.Cinder != nil && s.Cinder.SecretRef != nil }},
	{"flexVolume", "secretRef", func(s *corev1.VolumeSource) bool { return s.FlexVolume != nil && s.FlexVolume.SecretRef != nil }},
	{"iscsi", "secretRef", func(s *corev1.VolumeSource) bool { return s.ISCSI != nil && s.ISCSI.SecretRef != nil }},
	{"rbd", "secretRef", func(s *corev1.VolumeSource) bool { return s.RBD != nil && s.RBD.SecretRef != nil }},
	{"scaleIO", "secretRef", func(s *corev1.VolumeSource) bool { return s.ScaleIO != nil && s.ScaleIO.SecretRef != nil }},
	{"storageos", "secretRef", func(s *corev1.VolumeSource) bool { return s.StorageOS != nil && s.StorageOS.SecretRef != nil }},
	{"csi", "nodePublishSecretRef", func(s *corev1.VolumeSource) bool { return s.CSI != nil && s.CSI.NodePublishSecretRef != nil }},
}

// checkAPIReferences reports every API object that spec references, in
// every kind of container. The kubelet stops at the first; this reports
// each one with the wording the kubelet would use if it were the only one.
func checkAPIReferences(r *report, spec *corev1.PodSpec) {
	p := field.NewPath("spec")
	if spec.ServiceAccountName != "" {
		r.ref(p.Child("serviceAccountName"), "serviceaccounts")
	}
	if spec.DeprecatedServiceAccount != "" {
		// The kubelet takes the deprecated alias as serviceAccountName.
		r.ref(p.Child("serviceAccount"), "serviceaccounts")
	}
	for i := range spec.ImagePullSecrets {
		r.ref(p.Child("imagePullSecrets").Index(i), "secrets")
	}
	for i := range spec.ResourceClaims {
		r.ref(p.Child("resourceClaims").Index(i), "resourceclaims")
	}
	for _, c := range containers(spec) {
		for i, env := range c.Env {
			if env.ValueFrom != nil {
				r.refer(c.path.Child("env").Index(i).Child("valueFrom"), env.ValueFrom, envSources, "")
			}
		}
		for i := range c.EnvFrom {
			r.refer(c.path.Child("envFrom").Index(i), &c.EnvFrom[i], envFromSources, "")
		}
		for i := range c.Resources.Claims {
			// A claim names an entry of spec.resourceClaims.
			r.ref(c.path.Child("resources", "claims").Index(i), "resourceclaims")
		}
	}
	for i := range spec.Volumes {
		checkVolumeReferences(r, p.Child("volumes").Index(i), &spec.Volumes[i].VolumeSource)
	}
}

// checkVolumeReferences reports the API objects one volume references.
func checkVolumeReferences(r *report, p *field.Path, s *corev1.VolumeSource) {
	var named string // the Secret or ConfigMap the volume names, if any
	switch {
	case s.Secret != nil:
		named = s.Secret.SecretName
	case s.ConfigMap != nil:
		named = s.ConfigMap.Name
	case s.AzureFile != nil:
		named = s.AzureFile.SecretName
	}
	r.refer(p, s, volumeTypes, named)
	for _, ref := range volumeSecretRefs {
		if ref.has(s) {
			r.ref(p.Child(ref.volumeType, ref.field), "secrets")
		}
	}
	if s.Projected == nil {
		return
	}
	for j := range s.Projected.Sources {
		source := &s.Projected.Sources[j]
		named = ""
		switch {
		case source.Secret != nil:
			named = source.Secret.Name
		case source.ConfigMap != nil:
			named = source.ConfigMap.Name
		}
		r.refer(p.Child("projected", "sources").Index(j), source, projectedSources, named)
	}
}

// refer reports the set fields of the one-of struct oneOf at p that
// reference an API object according to reviewed, and denies those that
// reviewed does not list. named is the name of the Secret or ConfigMap the
// struct names, if any: the kubelet looks for named Secrets and ConfigMaps
// before it looks at volume types, so it reports a named one as plain
// "secrets" or "configmaps".
func (r *report) refer(p *field.Path, oneOf any, reviewed map[string]string, named string) {
	for _, name := range setFields(oneOf) {
		resource, ok := reviewed[name]
		switch {
		case !ok:
			r.add(p.Child(name), "%q is not known to kubeboot, so it is denied until reviewed for references to API objects, which static pods may not have", name)
		case resource == "":
		case named != "":
			r.ref(p.Child(name), strings.Fields(resource)[0])
		default:
			r.ref(p.Child(name), resource)
		}
	}
}

// ref records a reference to resource, which static pods may not have.
func (r *report) ref(p *field.Path, resource string) {
	*r = append(*r, Finding{
		Field:    p.String(),
		Resource: strings.Fields(resource)[0],
		Message:  fmt.Sprintf("static pods may not reference %s", resource),
	})
}
