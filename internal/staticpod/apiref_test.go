package staticpod

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// forbid is the finding for one forbidden reference, as the kubelet words it.
func forbid(fieldPath, resource, wording string) Finding {
	return Finding{Field: fieldPath, Resource: resource, Message: "static pods may not reference " + wording}
}

func TestAPIReferences(t *testing.T) {
	secretKey := &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "k"}}
	configMapKey := &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "c"}, Key: "k"}}
	secretRef := &corev1.LocalObjectReference{Name: "s"}
	projected := func(sources ...corev1.VolumeProjection) func(*corev1.Pod) {
		return withVolume(corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: sources}})
	}

	tests := []struct {
		name   string
		mutate func(*corev1.Pod)
		want   []Finding
	}{
		// Pod-wide references.
		{"serviceAccountName", func(p *corev1.Pod) { p.Spec.ServiceAccountName = "default" },
			[]Finding{forbid("spec.serviceAccountName", "serviceaccounts", "serviceaccounts")}},
		{"deprecated serviceAccount", func(p *corev1.Pod) { p.Spec.DeprecatedServiceAccount = "default" },
			[]Finding{forbid("spec.serviceAccount", "serviceaccounts", "serviceaccounts")}},
		{"imagePullSecrets", func(p *corev1.Pod) { p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}} },
			[]Finding{forbid("spec.imagePullSecrets[0]", "secrets", "secrets")}},
		{"resourceClaims", func(p *corev1.Pod) { p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu"}} },
			[]Finding{forbid("spec.resourceClaims[0]", "resourceclaims", "resourceclaims")}},
		{"container resource claim", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
		}, []Finding{forbid("spec.containers[0].resources.claims[0]", "resourceclaims", "resourceclaims")}},

		// Environment, in every kind of container.
		{"env secretKeyRef in container", func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "TOKEN", ValueFrom: secretKey}}
		}, []Finding{forbid("spec.containers[0].env[0].valueFrom.secretKeyRef", "secrets", "secrets")}},
		{"env secretKeyRef in init container", func(p *corev1.Pod) {
			p.Spec.InitContainers[0].Env = []corev1.EnvVar{{Name: "TOKEN", ValueFrom: secretKey}}
		}, []Finding{forbid("spec.initContainers[0].env[0].valueFrom.secretKeyRef", "secrets", "secrets")}},
		{"env secretKeyRef in sidecar", func(p *corev1.Pod) {
			p.Spec.InitContainers[1].Env = []corev1.EnvVar{{Name: "TOKEN", ValueFrom: secretKey}}
		}, []Finding{forbid("spec.initContainers[1].env[0].valueFrom.secretKeyRef", "secrets", "secrets")}},
		{"env secretKeyRef in ephemeral container", func(p *corev1.Pod) {
			withEphemeral(p).Env = []corev1.EnvVar{{Name: "TOKEN", ValueFrom: secretKey}}
		}, []Finding{ephemeralForbidden, forbid("spec.ephemeralContainers[0].env[0].valueFrom.secretKeyRef", "secrets", "secrets")}},
		{"env configMapKeyRef in container", func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "MODE", ValueFrom: configMapKey}}
		}, []Finding{forbid("spec.containers[0].env[0].valueFrom.configMapKeyRef", "configmaps", "configmaps")}},
		{"env configMapKeyRef in sidecar", func(p *corev1.Pod) {
			p.Spec.InitContainers[1].Env = []corev1.EnvVar{{Name: "MODE", ValueFrom: configMapKey}}
		}, []Finding{forbid("spec.initContainers[1].env[0].valueFrom.configMapKeyRef", "configmaps", "configmaps")}},
		{"envFrom secretRef in container", func(p *corev1.Pod) {
			p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: *secretRef}}}
		}, []Finding{forbid("spec.containers[0].envFrom[0].secretRef", "secrets", "secrets")}},
		{"envFrom secretRef in init container", func(p *corev1.Pod) {
			p.Spec.InitContainers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: *secretRef}}}
		}, []Finding{forbid("spec.initContainers[0].envFrom[0].secretRef", "secrets", "secrets")}},
		{"envFrom configMapRef in sidecar", func(p *corev1.Pod) {
			p.Spec.InitContainers[1].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: *secretRef}}}
		}, []Finding{forbid("spec.initContainers[1].envFrom[0].configMapRef", "configmaps", "configmaps")}},
		{"envFrom configMapRef in ephemeral container", func(p *corev1.Pod) {
			withEphemeral(p).EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: *secretRef}}}
		}, []Finding{ephemeralForbidden, forbid("spec.ephemeralContainers[0].envFrom[0].configMapRef", "configmaps", "configmaps")}},

		// Volume types. A named Secret or ConfigMap is reported plainly,
		// as the kubelet finds those before it looks at volume types.
		{"secret volume", withVolume(corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}),
			[]Finding{forbid("spec.volumes[0].secret", "secrets", "secrets")}},
		{"secret volume without a name", withVolume(corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{}}),
			[]Finding{forbid("spec.volumes[0].secret", "secrets", "secrets (via secret volumes)")}},
		{"configMap volume", withVolume(corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: *secretRef}}),
			[]Finding{forbid("spec.volumes[0].configMap", "configmaps", "configmaps")}},
		{"configMap volume without a name", withVolume(corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}),
			[]Finding{forbid("spec.volumes[0].configMap", "configmaps", "configmaps (via configmap volumes)")}},
		{"persistentVolumeClaim volume", withVolume(corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}),
			[]Finding{forbid("spec.volumes[0].persistentVolumeClaim", "persistentvolumeclaims", "persistentvolumeclaims")}},
		{"ephemeral volume", withVolume(corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}),
			[]Finding{forbid("spec.volumes[0].ephemeral", "persistentvolumeclaims", "persistentvolumeclaims (via ephemeral volumes)")}},
		{"csi volume", withVolume(corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "d"}}),
			[]Finding{forbid("spec.volumes[0].csi", "csidrivers", "csidrivers (via CSI volumes)")}},
		{"csi volume with a secret", withVolume(corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "d", NodePublishSecretRef: secretRef}}),
			[]Finding{
				forbid("spec.volumes[0].csi", "csidrivers", "csidrivers (via CSI volumes)"),
				forbid("spec.volumes[0].csi.nodePublishSecretRef", "secrets", "secrets"),
			}},
		{"glusterfs volume", withVolume(corev1.VolumeSource{Glusterfs: &corev1.GlusterfsVolumeSource{EndpointsName: "e", Path: "p"}}),
			[]Finding{forbid("spec.volumes[0].glusterfs", "endpoints", "endpoints (via glusterFS volumes)")}},
		{"azureFile volume", withVolume(corev1.VolumeSource{AzureFile: &corev1.AzureFileVolumeSource{SecretName: "s", ShareName: "x"}}),
			[]Finding{forbid("spec.volumes[0].azureFile", "secrets", "secrets")}},
		{"azureFile volume without a secret name", withVolume(corev1.VolumeSource{AzureFile: &corev1.AzureFileVolumeSource{ShareName: "x"}}),
			[]Finding{forbid("spec.volumes[0].azureFile", "secrets", "secrets (via azureFile volumes)")}},

		// Secrets inside volume types that are otherwise allowed.
		{"cephfs secretRef", withVolume(corev1.VolumeSource{CephFS: &corev1.CephFSVolumeSource{Monitors: []string{"m"}, SecretRef: secretRef}}),
			[]Finding{unchecked("cephfs"), forbid("spec.volumes[0].cephfs.secretRef", "secrets", "secrets")}},
		{"cinder secretRef", withVolume(corev1.VolumeSource{Cinder: &corev1.CinderVolumeSource{VolumeID: "v", SecretRef: secretRef}}),
			[]Finding{unchecked("cinder"), forbid("spec.volumes[0].cinder.secretRef", "secrets", "secrets")}},
		{"flexVolume secretRef", withVolume(corev1.VolumeSource{FlexVolume: &corev1.FlexVolumeSource{Driver: "d", SecretRef: secretRef}}),
			[]Finding{unchecked("flexVolume"), forbid("spec.volumes[0].flexVolume.secretRef", "secrets", "secrets")}},
		{"iscsi secretRef", withVolume(corev1.VolumeSource{ISCSI: &corev1.ISCSIVolumeSource{TargetPortal: "t", IQN: "i", SecretRef: secretRef}}),
			[]Finding{unchecked("iscsi"), forbid("spec.volumes[0].iscsi.secretRef", "secrets", "secrets")}},
		{"rbd secretRef", withVolume(corev1.VolumeSource{RBD: &corev1.RBDVolumeSource{CephMonitors: []string{"m"}, RBDImage: "i", SecretRef: secretRef}}),
			[]Finding{unchecked("rbd"), forbid("spec.volumes[0].rbd.secretRef", "secrets", "secrets")}},
		{"scaleIO secretRef", withVolume(corev1.VolumeSource{ScaleIO: &corev1.ScaleIOVolumeSource{Gateway: "g", System: "s", SecretRef: secretRef}}),
			[]Finding{unchecked("scaleIO"), forbid("spec.volumes[0].scaleIO.secretRef", "secrets", "secrets")}},
		{"storageos secretRef", withVolume(corev1.VolumeSource{StorageOS: &corev1.StorageOSVolumeSource{VolumeName: "v", SecretRef: secretRef}}),
			[]Finding{unchecked("storageos"), forbid("spec.volumes[0].storageos.secretRef", "secrets", "secrets")}},

		// Projected sources.
		{"projected configMap", projected(corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: *secretRef}}),
			[]Finding{forbid("spec.volumes[0].projected.sources[0].configMap", "configmaps", "configmaps")}},
		{"projected configMap without a name", projected(corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{}}),
			[]Finding{forbid("spec.volumes[0].projected.sources[0].configMap", "configmaps", "configmaps (via projected volumes)")}},
		{"projected secret after downwardAPI", projected(
			corev1.VolumeProjection{DownwardAPI: &corev1.DownwardAPIProjection{}},
			corev1.VolumeProjection{Secret: &corev1.SecretProjection{}},
		), []Finding{forbid("spec.volumes[0].projected.sources[1].secret", "secrets", "secrets (via projected volumes)")}},
		{"projected serviceAccountToken", projected(corev1.VolumeProjection{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}),
			[]Finding{forbid("spec.volumes[0].projected.sources[0].serviceAccountToken", "serviceaccounts", "serviceaccounts (via projected volumes)")}},
		{"projected clusterTrustBundle", projected(corev1.VolumeProjection{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Path: "ca.crt"}}),
			[]Finding{forbid("spec.volumes[0].projected.sources[0].clusterTrustBundle", "clustertrustbundles", "clustertrustbundles")}},
		{"projected podCertificate", projected(corev1.VolumeProjection{PodCertificate: &corev1.PodCertificateProjection{SignerName: "x/y"}}),
			[]Finding{forbid("spec.volumes[0].projected.sources[0].podCertificate", "podcertificates", "podcertificates")}},

		// Volume types that reference nothing but that kubeboot does not
		// check, and so refuses.
		{"nfs volume", withVolume(corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "s", Path: "/p"}}), []Finding{unchecked("nfs")}},
		{"cephfs volume without a secret", withVolume(corev1.VolumeSource{CephFS: &corev1.CephFSVolumeSource{Monitors: []string{"m"}}}), []Finding{unchecked("cephfs")}},

		// What a static pod may use.
		{"hostPath", withVolume(corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc/kubernetes/pki"}}), nil},
		{"emptyDir", withVolume(corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}), nil},
		{"downwardAPI", withVolume(corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
			{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
		}}}), nil},
		{"projected downwardAPI", projected(corev1.VolumeProjection{DownwardAPI: &corev1.DownwardAPIProjection{}}), nil},
		{"image volume", withVolume(corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "registry.k8s.io/etcd:3.6.8-0"}}), nil},
		{"priorityClassName system-node-critical", func(p *corev1.Pod) { p.Spec.PriorityClassName = "system-node-critical" }, nil},
		{"env from the downward API", func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}}
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := validPod()
			tt.mutate(pod)
			if diff := cmp.Diff(tt.want, ValidatePod(pod, testNode)); diff != "" {
				t.Errorf("ValidatePod() findings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReferDeniesUnreviewedFields shows the deny-by-default rule: a set
// field missing from the table is rejected, as a field newly added to the
// Kubernetes API would be.
func TestReferDeniesUnreviewedFields(t *testing.T) {
	reviewed := map[string]string{"hostPath": ""} // "nfs" has not been reviewed
	source := &corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "s", Path: "/p"}}
	var r report
	r.refer(field.NewPath("spec", "volumes").Index(0), source, reviewed, "")
	want := []Finding{{
		Field:   "spec.volumes[0].nfs",
		Message: `"nfs" is not known to kubeboot, so it is denied until reviewed for references to API objects, which static pods may not have`,
	}}
	if diff := cmp.Diff(want, []Finding(r)); diff != "" {
		t.Errorf("refer() findings (-want +got):\n%s", diff)
	}
}

// TestReviewTablesMatchTheAPI fails when k8s.io/api gains or loses a field
// in one of the reviewed one-of structs, so that an upgrade prompts a
// review of the new field instead of only denying it at run time.
func TestReviewTablesMatchTheAPI(t *testing.T) {
	tests := []struct {
		name     string
		oneOf    any
		reviewed map[string]string
	}{
		{"VolumeSource", corev1.VolumeSource{}, volumeTypes},
		{"VolumeProjection", corev1.VolumeProjection{}, projectedSources},
		{"EnvVarSource", corev1.EnvVarSource{}, envSources},
		{"EnvFromSource", corev1.EnvFromSource{}, envFromSources},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var fields []string
			typ := reflect.TypeOf(tt.oneOf)
			for i := range typ.NumField() {
				if typ.Field(i).Type.Kind() == reflect.Pointer {
					fields = append(fields, jsonTagName(typ.Field(i)))
				}
			}
			var listed []string
			for name := range tt.reviewed {
				listed = append(listed, name)
			}
			slices.Sort(fields)
			slices.Sort(listed)
			if diff := cmp.Diff(fields, listed); diff != "" {
				t.Errorf("reviewed fields differ from the API's (-api +table):\n%s", diff)
			}
		})
	}
}

// jsonTagName returns the JSON name of a struct field.
func jsonTagName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name
}

// unchecked is the finding for volume v of a volume type that kubeboot
// does not check.
func unchecked(volumeType string) Finding {
	return Finding{
		Field:   "spec.volumes[0]." + volumeType,
		Message: "not supported in a static pod: kubeboot does not check " + volumeType + " volumes, so it cannot vouch that the kubelet mounts them; use hostPath for the node's storage",
	}
}
