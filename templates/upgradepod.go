package templates

import (
	"path"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// UpgradePodPrefix begins the name of the pod `upgrade cluster` runs on
// each node, which the node's name ends.
const UpgradePodPrefix = "kubeboot-upgrade-"

// UpgradePodLabel marks the pods `upgrade cluster` runs, with the node's
// name as its value.
const UpgradePodLabel = "kubeboot.io/upgrade-node"

// UpgradeHostRoot is where the upgrade pod sees the node's root.
const UpgradeHostRoot = "/host"

// UpgradeOnNodeCommand is the kubeboot subcommand the upgrade pod runs.
var UpgradeOnNodeCommand = []string{"upgrade", "on-node"}

// UpgradePod builds the pod `kubeboot upgrade cluster` runs on node to
// upgrade it: the node's own kubeboot (kb), seen under UpgradeHostRoot, in
// image (the image of kubeboot's own pods, which every node holds), with
// args after UpgradeOnNodeCommand. It runs in the host's namespaces,
// privileged and as root, with the node's root mounted, since what it
// starts is the node's own upgrade, as a transient systemd unit that a
// kubelet restart does not stop. It tolerates every taint, is bound to
// node by name (a cordoned node still runs it), and never restarts: a
// failed upgrade is reported, not retried behind the caller's back.
func UpgradePod(node, image string, kb Kubeboot, args []string) *corev1.Pod {
	return hostPod(UpgradePodPrefix+node, UpgradePodLabel, node, image, kb, UpgradeOnNodeCommand, args)
}

// RotateCAPodPrefix begins the name of the pods `certs rotate-ca` runs on
// each node, which the step and the node's name end.
const RotateCAPodPrefix = "kubeboot-rotate-ca-"

// RotateCAPodLabel marks the pods `certs rotate-ca` runs, with the node's
// name as its value.
const RotateCAPodLabel = "kubeboot.io/rotate-ca-node"

// RotateCAMaterial is the Secret in kube-system that holds a CA
// rotation's files, and where its pods see them.
const (
	RotateCAMaterial      = "kubeboot-rotate-ca"
	RotateCAMaterialMount = "/kubeboot-rotate-ca"
)

// RotateCAOnNodeCommand is the kubeboot subcommand the rotation's pods run.
var RotateCAOnNodeCommand = []string{"certs", "rotate-ca", "on-node"}

// RotateCAPod builds the pod `kubeboot certs rotate-ca` runs on node for
// one step: as UpgradePod's, with the rotation's Secret (RotateCAMaterial)
// mounted read-only at RotateCAMaterialMount, and args after
// RotateCAOnNodeCommand.
func RotateCAPod(node, step, image string, kb Kubeboot, args []string) *corev1.Pod {
	pod := hostPod(RotateCAPodPrefix+step+"-"+node, RotateCAPodLabel, node, image, kb, RotateCAOnNodeCommand, args)
	c := &pod.Spec.Containers[0]
	c.Name = "rotate-ca"
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "material", MountPath: RotateCAMaterialMount, ReadOnly: true})
	mode := int32(0o400)
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "material", VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: RotateCAMaterial, DefaultMode: &mode}}})
	return pod
}

// hostPod is a pod named name that runs the node's own kubeboot (kb)
// with command and args, as UpgradePod says, labelled label=node.
func hostPod(name, label, node, image string, kb Kubeboot, command, args []string) *corev1.Pod {
	yes := true
	root := int64(0)
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   metav1.NamespaceSystem,
			Labels:      map[string]string{label: node},
			Annotations: map[string]string{AnnotationKubebootVersion: kb.Version},
		},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			HostPID:                      true,
			HostNetwork:                  true,
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: new(bool),
			Tolerations:                  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			PriorityClassName:            "system-node-critical",
			Containers: []corev1.Container{{
				Name:            "upgrade",
				Image:           image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         append([]string{path.Join(UpgradeHostRoot, kb.Binary)}, command...),
				Args:            args,
				SecurityContext: &corev1.SecurityContext{Privileged: &yes, RunAsUser: &root, RunAsGroup: &root},
				VolumeMounts:    []corev1.VolumeMount{{Name: "host", MountPath: UpgradeHostRoot}},
			}},
			Volumes: []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}},
		},
	}
}
