package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/machine"
	"github.com/kubeboot/kubeboot/templates"
)

// The images of the lab's default StorageClass, built from <bin dir> as
// the others are: rancher's local-path-provisioner, and the BusyBox its
// helper pods run to make and remove the volumes' directories.
const (
	LocalPathProvisionerImage = "docker.io/rancher/local-path-provisioner:v0.0.30"
	BusyboxImage              = "docker.io/library/busybox:1.37.0"
)

// storageClassName is the lab's default StorageClass, kind's name for it.
const storageClassName = "standard"

// defaultClassAnnotation, "true" on a StorageClass, makes it the class of
// the claims that name none.
const defaultClassAnnotation = "storageclass.kubernetes.io/is-default-class"

// The names local-path-provisioner is given and expects.
const (
	storageNamespace = "local-path-storage"
	// storageName names its ServiceAccount, roles, bindings and Deployment.
	storageName = localPathProvisioner
	// storageConfigMap holds its configuration, the helper pod and the
	// scripts the helper pods run, which it mounts into them by this name.
	storageConfigMap = "local-path-config"
	// storageProvisioner is the StorageClasses' provisioner it serves.
	storageProvisioner = "rancher.io/local-path"
	// storageConfigDir is where its pod mounts storageConfigMap.
	storageConfigDir = "/etc/config"
	// storageVolumesDir is the directory on every node under which it
	// makes the volumes.
	storageVolumesDir = "/opt/local-path-provisioner"
	// storageHelperContainer is the helper pod's container, whose log the
	// provisioner copies into its own by this name.
	storageHelperContainer = "helper-pod"
	// storageManifestPath is where, in the first node, the objects are
	// written for kubectl.
	storageManifestPath = "/etc/kubeboot-lab/storage.yaml"
)

// localPathConfig is local-path-provisioner's config.json.
type localPathConfig struct {
	NodePathMap []localPathNode `json:"nodePathMap"`
}

// localPathNode is the directories a node's volumes go to; the node
// DEFAULT_PATH_FOR_NON_LISTED_NODES stands for every node not listed.
type localPathNode struct {
	Node  string   `json:"node"`
	Paths []string `json:"paths"`
}

// The scripts a helper pod runs, with the volume's directory in VOL_DIR,
// to make it (writable by any pod's user) and to remove it.
const (
	storageSetup    = "#!/bin/sh\nset -eu\nmkdir -p -m 0777 \"$VOL_DIR\"\n"
	storageTeardown = "#!/bin/sh\nset -eu\nrm -rf \"$VOL_DIR\"\n"
)

// applyStorage gives the cluster its default StorageClass: it writes the
// objects of storageObjects into the machine m, a control-plane node, and
// applies them with its kubectl; storageRollout is the provisioner's
// rollout, which waits for a worker.
func applyStorage(ctx context.Context, m machine.Machine) error {
	manifest, err := storageManifest()
	if err != nil {
		return err
	}
	path := filepath.Join(m.Root(), storageManifestPath)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, manifest, 0o600); err != nil {
		return err
	}
	_, err = kubectl(ctx, m, "apply", "--server-side", "--field-manager=kubeboot", "-f", storageManifestPath)
	return err
}

// storageRollout is the provisioner's Deployment, for `kubectl rollout
// status` in its namespace.
const storageRollout = "deployment/" + storageName

// storageManifest is storageObjects as one YAML stream.
func storageManifest() ([]byte, error) {
	objs, err := storageObjects()
	if err != nil {
		return nil, err
	}
	var out []byte
	for i, obj := range objs {
		data, err := yaml.Marshal(obj)
		if err != nil {
			return nil, fmt.Errorf("render the lab's storage objects: %w", err)
		}
		if i > 0 {
			out = append(out, "---\n"...)
		}
		out = append(out, data...)
	}
	return out, nil
}

// storageObjects are the objects of the lab's default StorageClass, in the
// order they are applied: local-path-provisioner's namespace, its
// identity and grants, its configuration, its Deployment, and the
// StorageClass it serves.
func storageObjects() ([]any, error) {
	cm, err := storageConfig()
	if err != nil {
		return nil, err
	}
	ns := storageNamespace
	return []any{
		&corev1.Namespace{TypeMeta: typeMeta("v1", "Namespace"), ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ServiceAccount{TypeMeta: typeMeta("v1", "ServiceAccount"), ObjectMeta: metav1.ObjectMeta{Name: storageName, Namespace: ns}},
		&rbacv1.ClusterRole{TypeMeta: typeMeta(rbacv1.SchemeGroupVersion.String(), "ClusterRole"),
			ObjectMeta: metav1.ObjectMeta{Name: storageName}, Rules: storageClusterRules()},
		&rbacv1.ClusterRoleBinding{TypeMeta: typeMeta(rbacv1.SchemeGroupVersion.String(), "ClusterRoleBinding"),
			ObjectMeta: metav1.ObjectMeta{Name: storageName}, RoleRef: storageRoleRef("ClusterRole"), Subjects: storageSubjects()},
		&rbacv1.Role{TypeMeta: typeMeta(rbacv1.SchemeGroupVersion.String(), "Role"),
			ObjectMeta: metav1.ObjectMeta{Name: storageName, Namespace: ns}, Rules: storageHelperRules()},
		&rbacv1.RoleBinding{TypeMeta: typeMeta(rbacv1.SchemeGroupVersion.String(), "RoleBinding"),
			ObjectMeta: metav1.ObjectMeta{Name: storageName, Namespace: ns}, RoleRef: storageRoleRef("Role"), Subjects: storageSubjects()},
		cm,
		storageDeployment(),
		&storagev1.StorageClass{
			TypeMeta: typeMeta(storagev1.SchemeGroupVersion.String(), "StorageClass"),
			ObjectMeta: metav1.ObjectMeta{Name: storageClassName,
				Annotations: map[string]string{defaultClassAnnotation: "true"}},
			Provisioner:       storageProvisioner,
			ReclaimPolicy:     new(corev1.PersistentVolumeReclaimDelete),
			VolumeBindingMode: new(storagev1.VolumeBindingWaitForFirstConsumer),
		},
	}, nil
}

// typeMeta is an object's apiVersion and kind, which kubectl needs.
func typeMeta(apiVersion, kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}
}

// storageClusterRules are what local-path-provisioner does cluster-wide:
// its controller (sig-storage-lib-external-provisioner's, without leader
// election) watches the claims, volumes and classes, gets the node a
// claim's pod was scheduled to, creates, patches (a finalizer) and deletes
// volumes, updates a claim to have its pod rescheduled, and records
// events on the claims.
func storageClusterRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"list", "watch", "update"}},
		{APIGroups: []string{""}, Resources: []string{"persistentvolumes"}, Verbs: []string{"list", "watch", "create", "patch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{storagev1.GroupName}, Resources: []string{"storageclasses"}, Verbs: []string{"list", "watch"}},
	}
}

// storageHelperRules are what it does in its namespace: create a helper
// pod per volume made or removed, get it until it succeeded, read its log
// and delete it. Its configuration comes from files, so it reads no
// ConfigMap.
func storageHelperRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
	}
}

// storageRoleRef is the binding's reference to the provisioner's role of
// that kind.
func storageRoleRef(kind string) rbacv1.RoleRef {
	return rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: storageName}
}

// storageSubjects is the provisioner's ServiceAccount.
func storageSubjects() []rbacv1.Subject {
	return []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: storageName, Namespace: storageNamespace}}
}

// storageConfig is the provisioner's ConfigMap: config.json, volumes under
// storageVolumesDir on every node; the helper pod, which runs the lab's
// BusyBox; and the scripts it runs.
func storageConfig() (*corev1.ConfigMap, error) {
	cfg, err := json.Marshal(localPathConfig{NodePathMap: []localPathNode{
		{Node: "DEFAULT_PATH_FOR_NON_LISTED_NODES", Paths: []string{storageVolumesDir}}}})
	if err != nil {
		return nil, err
	}
	helper, err := templates.Marshal(&corev1.Pod{
		TypeMeta:   typeMeta("v1", "Pod"),
		ObjectMeta: metav1.ObjectMeta{Name: storageHelperContainer},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: storageHelperContainer, Image: BusyboxImage, ImagePullPolicy: corev1.PullIfNotPresent}}},
	})
	if err != nil {
		return nil, err
	}
	return &corev1.ConfigMap{
		TypeMeta:   typeMeta("v1", "ConfigMap"),
		ObjectMeta: metav1.ObjectMeta{Name: storageConfigMap, Namespace: storageNamespace},
		Data: map[string]string{
			"config.json":    string(cfg),
			"helperPod.yaml": string(helper),
			"setup":          storageSetup,
			"teardown":       storageTeardown,
		},
	}, nil
}

// storageDeployment runs the provisioner, with its configuration and
// helper pod read from storageConfigMap's files and every name it uses
// given.
func storageDeployment() *appsv1.Deployment {
	labels := func() map[string]string { return map[string]string{"app": storageName} }
	return &appsv1.Deployment{
		TypeMeta:   typeMeta(appsv1.SchemeGroupVersion.String(), "Deployment"),
		ObjectMeta: metav1.ObjectMeta{Name: storageName, Namespace: storageNamespace, Labels: labels()},
		Spec: appsv1.DeploymentSpec{
			Replicas: new(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels()},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels()},
				Spec: corev1.PodSpec{
					ServiceAccountName: storageName,
					// A lab of control-plane nodes alone has its volumes too.
					Tolerations: []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
					Containers: []corev1.Container{{
						Name:            storageName,
						Image:           LocalPathProvisionerImage,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Command: []string{localPathProvisioner, "--debug", "start",
							"--config", storageConfigDir + "/config.json",
							"--helper-pod-file", storageConfigDir + "/helperPod.yaml",
							"--provisioner-name", storageProvisioner,
							"--namespace", storageNamespace,
							"--service-account-name", storageName,
							"--configmap-name", storageConfigMap},
						VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: storageConfigDir, ReadOnly: true}},
					}},
					Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
						ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: storageConfigMap}}}}},
				},
			},
		},
	}
}
