package lab

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"sigs.k8s.io/yaml"
)

// storageStream is the lab's storage manifest decoded strictly, document
// by document, into the typed objects its kinds name.
type storageStream struct {
	kinds               []string
	namespace           corev1.Namespace
	serviceAccount      corev1.ServiceAccount
	clusterRole         rbacv1.ClusterRole
	clusterRoleBinding  rbacv1.ClusterRoleBinding
	role                rbacv1.Role
	roleBinding         rbacv1.RoleBinding
	configMap           corev1.ConfigMap
	deployment          appsv1.Deployment
	storageClasses      []storagev1.StorageClass
	helperPod           corev1.Pod
	provisionerSettings localPathConfig
}

func decodeStorage(t *testing.T) storageStream {
	t.Helper()
	manifest, err := storageManifest()
	if err != nil {
		t.Fatal(err)
	}
	var s storageStream
	for doc := range strings.SplitSeq(string(manifest), "\n---\n") {
		var meta struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("a document of the stream: %v\n%s", err, doc)
		}
		s.kinds = append(s.kinds, meta.APIVersion+" "+meta.Kind)
		var target any
		switch meta.Kind {
		case "Namespace":
			target = &s.namespace
		case "ServiceAccount":
			target = &s.serviceAccount
		case "ClusterRole":
			target = &s.clusterRole
		case "ClusterRoleBinding":
			target = &s.clusterRoleBinding
		case "Role":
			target = &s.role
		case "RoleBinding":
			target = &s.roleBinding
		case "ConfigMap":
			target = &s.configMap
		case "Deployment":
			target = &s.deployment
		case "StorageClass":
			s.storageClasses = append(s.storageClasses, storagev1.StorageClass{})
			target = &s.storageClasses[len(s.storageClasses)-1]
		default:
			t.Fatalf("an object of kind %q in the stream", meta.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), target); err != nil {
			t.Fatalf("decode the %s: %v\n%s", meta.Kind, err, doc)
		}
	}
	if err := yaml.UnmarshalStrict([]byte(s.configMap.Data["helperPod.yaml"]), &s.helperPod); err != nil {
		t.Fatalf("helperPod.yaml: %v", err)
	}
	decoder := json.NewDecoder(strings.NewReader(s.configMap.Data["config.json"]))
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&s.provisionerSettings); err != nil {
		t.Fatalf("config.json: %v", err)
	}
	return s
}

// flagValue is the value that follows flag in args.
func flagValue(t *testing.T, args []string, flag string) string {
	t.Helper()
	i := slices.Index(args, flag)
	if i < 0 || i+1 == len(args) {
		t.Fatalf("no %s in %q", flag, args)
	}
	return args[i+1]
}

// TestStorageObjects: the lab's storage manifest is one YAML stream of
// typed objects, in an order kubectl can apply (the namespace first), of
// which the StorageClass is the default one, served by the provisioner
// that the Deployment runs, with its binding mode and reclaim policy; the
// Deployment reads its configuration and helper pod from the ConfigMap's
// files, and the roles are bound to its ServiceAccount.
func TestStorageObjects(t *testing.T) {
	s := decodeStorage(t)
	wantKinds := []string{"v1 Namespace", "v1 ServiceAccount",
		"rbac.authorization.k8s.io/v1 ClusterRole", "rbac.authorization.k8s.io/v1 ClusterRoleBinding",
		"rbac.authorization.k8s.io/v1 Role", "rbac.authorization.k8s.io/v1 RoleBinding",
		"v1 ConfigMap", "apps/v1 Deployment", "storage.k8s.io/v1 StorageClass"}
	if diff := cmp.Diff(wantKinds, s.kinds); diff != "" {
		t.Errorf("the stream's objects (-want +got):\n%s", diff)
	}

	if len(s.storageClasses) != 1 {
		t.Fatalf("%d StorageClasses, want one", len(s.storageClasses))
	}
	class := s.storageClasses[0]
	container := s.deployment.Spec.Template.Spec.Containers[0]
	args := container.Command
	if class.Annotations["storageclass.kubernetes.io/is-default-class"] != "true" {
		t.Errorf("StorageClass %s is not the default one: %v", class.Name, class.Annotations)
	}
	if got := flagValue(t, args, "--provisioner-name"); class.Provisioner != got || got != "rancher.io/local-path" {
		t.Errorf("StorageClass's provisioner %q, the provisioner's name %q: want both rancher.io/local-path", class.Provisioner, got)
	}
	if class.VolumeBindingMode == nil || *class.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer ||
		class.ReclaimPolicy == nil || *class.ReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		t.Errorf("StorageClass binding mode %v, reclaim policy %v; want WaitForFirstConsumer and Delete", class.VolumeBindingMode, class.ReclaimPolicy)
	}

	// A lab of one control-plane node runs the provisioner too.
	tolerated := slices.ContainsFunc(s.deployment.Spec.Template.Spec.Tolerations, func(tol corev1.Toleration) bool {
		return tol.Key == "node-role.kubernetes.io/control-plane" && tol.Operator == corev1.TolerationOpExists && tol.Effect == corev1.TaintEffectNoSchedule
	})
	if !tolerated {
		t.Errorf("the provisioner does not tolerate the control plane's taint: %v", s.deployment.Spec.Template.Spec.Tolerations)
	}

	ns := s.namespace.Name
	if ns != flagValue(t, args, "--namespace") || s.deployment.Namespace != ns || s.configMap.Namespace != ns || s.serviceAccount.Namespace != ns || s.role.Namespace != ns {
		t.Errorf("namespaces: %s; the provisioner's %s, the Deployment's %s, the ConfigMap's %s, the ServiceAccount's %s, the Role's %s",
			ns, flagValue(t, args, "--namespace"), s.deployment.Namespace, s.configMap.Namespace, s.serviceAccount.Namespace, s.role.Namespace)
	}
	if sa := s.deployment.Spec.Template.Spec.ServiceAccountName; sa != s.serviceAccount.Name || flagValue(t, args, "--service-account-name") != sa {
		t.Errorf("the pod's ServiceAccount %q, the helper pods' %q, want %q", sa, flagValue(t, args, "--service-account-name"), s.serviceAccount.Name)
	}
	if flagValue(t, args, "--configmap-name") != s.configMap.Name {
		t.Errorf("the provisioner mounts ConfigMap %q into the helper pods, want %q", flagValue(t, args, "--configmap-name"), s.configMap.Name)
	}
	subjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: s.serviceAccount.Name, Namespace: ns}}
	for _, b := range []struct {
		ref      rbacv1.RoleRef
		subjects []rbacv1.Subject
		kind     string
		name     string
	}{
		{s.clusterRoleBinding.RoleRef, s.clusterRoleBinding.Subjects, "ClusterRole", s.clusterRole.Name},
		{s.roleBinding.RoleRef, s.roleBinding.Subjects, "Role", s.role.Name},
	} {
		if b.ref != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: b.kind, Name: b.name}) || !cmp.Equal(subjects, b.subjects) {
			t.Errorf("the binding of the %s %s: %+v to %+v", b.kind, b.name, b.ref, b.subjects)
		}
	}

	// The files the provisioner is told to read are the ConfigMap's keys,
	// where its volume is mounted.
	mounts := container.VolumeMounts
	volumes := s.deployment.Spec.Template.Spec.Volumes
	if len(mounts) != 1 || len(volumes) != 1 || mounts[0].Name != volumes[0].Name ||
		volumes[0].ConfigMap == nil || volumes[0].ConfigMap.Name != s.configMap.Name {
		t.Fatalf("the provisioner's volumes %+v, mounted %+v; want the ConfigMap %s", volumes, mounts, s.configMap.Name)
	}
	for _, flag := range []string{"--config", "--helper-pod-file"} {
		path := flagValue(t, args, flag)
		if filepath.Dir(path) != mounts[0].MountPath || s.configMap.Data[filepath.Base(path)] == "" {
			t.Errorf("%s %s is not a key of the ConfigMap mounted at %s", flag, path, mounts[0].MountPath)
		}
	}
	want := localPathConfig{NodePathMap: []localPathNode{{Node: "DEFAULT_PATH_FOR_NON_LISTED_NODES", Paths: []string{"/opt/local-path-provisioner"}}}}
	if diff := cmp.Diff(want, s.provisionerSettings); diff != "" {
		t.Errorf("config.json (-want +got):\n%s", diff)
	}
}

// TestStorageImages: the provisioner's Deployment runs the image
// ResolveImage builds from the bin dir's binary, by the name that image
// has it under on its PATH; its helper pod (with the container name whose
// log the provisioner reads) runs the lab's BusyBox image, never pulled.
func TestStorageImages(t *testing.T) {
	s := decodeStorage(t)
	bin := t.TempDir()
	provisioner := filepath.Join(bin, "local-path-provisioner")
	if err := os.WriteFile(provisioner, []byte("#!/bin/sh\necho local-path-provisioner version v0.0.30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(bin, "rootfs/busybox"), 0o755); err != nil {
		t.Fatal(err)
	}

	container := s.deployment.Spec.Template.Spec.Containers[0]
	img, err := ResolveImage(bin, container.Image)
	if err != nil {
		t.Fatal(err)
	}
	if container.Image != LocalPathProvisionerImage || img.Files["/usr/bin/"+container.Command[0]] != provisioner || container.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("the provisioner runs %q from %s (%s); its image holds %v", container.Command[0], container.Image, container.ImagePullPolicy, img.Files)
	}

	helpers := s.helperPod.Spec.Containers
	if len(helpers) != 1 || helpers[0].Name != "helper-pod" || helpers[0].Image != BusyboxImage || helpers[0].ImagePullPolicy != corev1.PullIfNotPresent {
		t.Fatalf("helperPod.yaml's containers: %+v; want helper-pod running %s, IfNotPresent", helpers, BusyboxImage)
	}
	img, err = ResolveImage(bin, helpers[0].Image)
	if err != nil || !cmp.Equal(img.Trees, []string{filepath.Join(bin, "rootfs/busybox")}) {
		t.Errorf("the helper's image: %+v, %v; want BusyBox's tree", img, err)
	}
}

// TestStorageScripts: the helper pods' setup script makes the volume's
// directory, writable by any user, and the teardown script removes it.
func TestStorageScripts(t *testing.T) {
	data := decodeStorage(t).configMap.Data
	vol := filepath.Join(t.TempDir(), "pvc-1_default_data")
	run := func(script string) {
		t.Helper()
		cmd := exec.Command("sh", "-c", data[script])
		cmd.Env = append(os.Environ(), "VOL_DIR="+vol)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", script, err, out)
		}
	}
	run("setup")
	if info, err := os.Stat(vol); err != nil || !info.IsDir() || info.Mode().Perm() != 0o777 {
		t.Fatalf("after setup: %v, %v; want a directory of mode 0777", info, err)
	}
	if err := os.WriteFile(filepath.Join(vol, "data"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	run("teardown")
	if _, err := os.Stat(vol); !os.IsNotExist(err) {
		t.Errorf("after teardown: %v; want the directory gone", err)
	}
}

// TestStorageGrants: the provisioner's roles grant exactly what its code
// and its controller library do: cluster-wide, watch claims, volumes and
// classes, get the selected node, create, patch and delete volumes,
// update a claim to reschedule it, record events; in its namespace,
// create, get and delete its helper pods and read their logs.
func TestStorageGrants(t *testing.T) {
	s := decodeStorage(t)
	grants := func(rules []rbacv1.PolicyRule) []string {
		var out []string
		for _, r := range rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						out = append(out, g+"/"+res+" "+v)
					}
				}
			}
		}
		slices.Sort(out)
		return out
	}
	wantCluster := []string{
		"/events create", "/events patch",
		"/nodes get",
		"/persistentvolumeclaims list", "/persistentvolumeclaims update", "/persistentvolumeclaims watch",
		"/persistentvolumes create", "/persistentvolumes delete", "/persistentvolumes list", "/persistentvolumes patch", "/persistentvolumes watch",
		"storage.k8s.io/storageclasses list", "storage.k8s.io/storageclasses watch",
	}
	if diff := cmp.Diff(wantCluster, grants(s.clusterRole.Rules)); diff != "" {
		t.Errorf("the ClusterRole (-want +got):\n%s", diff)
	}
	wantNamespace := []string{"/pods create", "/pods delete", "/pods get", "/pods/log get"}
	if diff := cmp.Diff(wantNamespace, grants(s.role.Rules)); diff != "" {
		t.Errorf("the Role (-want +got):\n%s", diff)
	}
}
