package staticpod

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestValidatePodChecks covers the pod create validation that the kubelet
// applies. Each case names the fields it expects findings at, and a word
// that the first finding's message must contain.
func TestValidatePodChecks(t *testing.T) {
	httpProbe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/livez", Port: intstr.FromInt32(6443)}}}
	hostPathVolume := corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc/kubernetes/pki"}}

	tests := []struct {
		name     string
		nodeName string // testNode when empty
		mutate   func(*corev1.Pod)
		fields   []string
		contains string
	}{
		{name: "valid", mutate: func(*corev1.Pod) {}},
		{name: "node name is lower-cased as the kubelet does", nodeName: "Node-1", mutate: func(*corev1.Pod) {}},
		{name: "missing name", mutate: func(p *corev1.Pod) { p.Name = "" },
			fields: []string{"metadata.name"}, contains: "required"},
		{name: "name invalid only with the node suffix", mutate: func(p *corev1.Pod) { p.Name = strings.Repeat("a", 250) },
			fields: []string{"metadata.name"}, contains: "node-name suffix"},
		{name: "node name makes the pod name invalid", nodeName: "node_1", mutate: func(*corev1.Pod) {},
			fields: []string{"metadata.name"}, contains: `"kube-apiserver-node_1"`},
		{name: "invalid label value", mutate: func(p *corev1.Pod) { p.Labels = map[string]string{"tier": "control plane"} },
			fields: []string{"metadata.labels[tier]"}, contains: "invalid value"},
		{name: "no containers", mutate: func(p *corev1.Pod) { p.Spec.Containers = nil },
			fields: []string{"spec.containers"}, contains: "at least one container"},
		{name: "duplicate container names across init and regular containers", mutate: func(p *corev1.Pod) { p.Spec.Containers[0].Name = "init" },
			fields: []string{"spec.containers[0].name"}, contains: "spec.initContainers[0].name"},
		{name: "invalid container name", mutate: func(p *corev1.Pod) { p.Spec.Containers[0].Name = "Kube_APIServer" },
			fields: []string{"spec.containers[0].name"}, contains: "RFC 1123 label"},
		{name: "missing image", mutate: func(p *corev1.Pod) { p.Spec.Containers[0].Image = "" },
			fields: []string{"spec.containers[0].image"}, contains: "required"},
		{name: "missing image in init container", mutate: func(p *corev1.Pod) { p.Spec.InitContainers[0].Image = "" },
			fields: []string{"spec.initContainers[0].image"}, contains: "required"},
		{name: "ephemeral container", mutate: func(p *corev1.Pod) { withEphemeral(p) },
			fields: []string{"spec.ephemeralContainers"}, contains: "forbidden"},
		{name: "invalid restartPolicy", mutate: func(p *corev1.Pod) { p.Spec.RestartPolicy = "Sometimes" },
			fields: []string{"spec.restartPolicy"}, contains: `"Sometimes"`},
		{name: "dnsPolicy None without dnsConfig", mutate: func(p *corev1.Pod) { p.Spec.DNSPolicy = corev1.DNSNone },
			fields: []string{"spec.dnsConfig"}, contains: "required"},
		{name: "duplicate volume names", mutate: func(p *corev1.Pod) {
			withVolume(hostPathVolume)(p)
			withVolume(hostPathVolume)(p)
		}, fields: []string{"spec.volumes[1].name"}, contains: "duplicate"},
		{name: "invalid volume name", mutate: func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "k8s_certs", VolumeSource: hostPathVolume}}
		}, fields: []string{"spec.volumes[0].name"}, contains: "RFC 1123 label"},
		{name: "two volume sources", mutate: withVolume(corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/etcd"}, EmptyDir: &corev1.EmptyDirVolumeSource{},
		}), fields: []string{"spec.volumes[0]"}, contains: "hostPath, emptyDir"},
		{name: "no volume source", mutate: withVolume(corev1.VolumeSource{}),
			fields: []string{"spec.volumes[0]"}, contains: "emptyDir"},
		{name: "hostPath without a path", mutate: withVolume(corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{}}),
			fields: []string{"spec.volumes[0].hostPath.path"}, contains: "required"},
		{name: "hostPath with a backstep", mutate: withVolume(corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc/../root"}}),
			fields: []string{"spec.volumes[0].hostPath.path"}, contains: "'..'"},
		{name: "image volume without a reference", mutate: withVolume(corev1.VolumeSource{Image: &corev1.ImageVolumeSource{}}),
			fields: []string{"spec.volumes[0].image.reference"}, contains: "required"},
		{name: "projected source of no type", mutate: withVolume(corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{}},
		}}), fields: []string{"spec.volumes[0].projected.sources[0]"}, contains: "must specify"},
		{name: "mount of an undefined volume", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "k8s-certs", MountPath: "/etc/kubernetes/pki"}}
		}, fields: []string{"spec.containers[0].volumeMounts[0].name"}, contains: "not defined"},
		{name: "same mount path twice", mutate: func(p *corev1.Pod) {
			withVolume(hostPathVolume)(p)
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "v", MountPath: "/pki"}, {Name: "v", MountPath: "/pki"}}
		}, fields: []string{"spec.containers[0].volumeMounts[1].mountPath"}, contains: "twice"},
		{name: "invalid env var name", mutate: func(p *corev1.Pod) { p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A=B"}} },
			fields: []string{"spec.containers[0].env[0].name"}, contains: "invalid value"},
		{name: "env value and valueFrom", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "IP", Value: "x", ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}}
		}, fields: []string{"spec.containers[0].env[0].valueFrom"}, contains: "value is set"},
		{name: "env fieldRef to an unsupported field", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "IP", ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIp"}}}}
		}, fields: []string{"spec.containers[0].env[0].valueFrom.fieldRef.fieldPath"}, contains: `"status.podIp"`},
		{name: "port out of range", mutate: func(p *corev1.Pod) { p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 70000}} },
			fields: []string{"spec.containers[0].ports[0].containerPort"}, contains: "70000"},
		{name: "port without a number", mutate: func(p *corev1.Pod) { p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "https"}} },
			fields: []string{"spec.containers[0].ports[0].containerPort"}, contains: "required"},
		{name: "hostPort differs from containerPort with hostNetwork", mutate: func(p *corev1.Pod) {
			p.Spec.HostNetwork = true
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 6443, HostPort: 443}}
		}, fields: []string{"spec.containers[0].ports[0].hostPort"}, contains: "hostNetwork"},
		{name: "host port bound by two containers", mutate: func(p *corev1.Pod) {
			p.Spec.HostNetwork = true
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "second", Image: "x"})
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 2379}}
			p.Spec.Containers[1].Ports = []corev1.ContainerPort{{ContainerPort: 2379, Protocol: corev1.ProtocolTCP}}
		}, fields: []string{"spec.containers[1].ports[0]"}, contains: "2379/TCP"},
		{name: "probe without a handler", mutate: func(p *corev1.Pod) { p.Spec.Containers[0].LivenessProbe = &corev1.Probe{} },
			fields: []string{"spec.containers[0].livenessProbe"}, contains: "must specify a handler"},
		{name: "probe with two handlers", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
				HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(6443)}, TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(6443)}}}
		}, fields: []string{"spec.containers[0].readinessProbe"}, contains: "httpGet, tcpSocket"},
		{name: "liveness probe successThreshold above 1", mutate: func(p *corev1.Pod) {
			probe := *httpProbe
			probe.SuccessThreshold = 2
			p.Spec.Containers[0].LivenessProbe = &probe
		}, fields: []string{"spec.containers[0].livenessProbe.successThreshold"}, contains: "must be 1"},
		{name: "probe on an init container", mutate: func(p *corev1.Pod) { p.Spec.InitContainers[0].StartupProbe = httpProbe },
			fields: []string{"spec.initContainers[0].startupProbe"}, contains: "restartPolicy Always"},
		{name: "probe on a sidecar", mutate: func(p *corev1.Pod) { p.Spec.InitContainers[1].StartupProbe = httpProbe }},
		{name: "invalid container restartPolicy", mutate: func(p *corev1.Pod) {
			never := corev1.ContainerRestartPolicy("Sometimes")
			p.Spec.Containers[0].RestartPolicy = &never
		}, fields: []string{"spec.containers[0].restartPolicy"}, contains: `"Sometimes"`},
		{name: "request above limit", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources = corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")},
			}
		}, fields: []string{"spec.containers[0].resources.requests[cpu]"}, contains: "limit 500m"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := validPod()
			tt.mutate(pod)
			nodeName := tt.nodeName
			if nodeName == "" {
				nodeName = testNode
			}
			got := ValidatePod(pod, nodeName)
			var fields []string
			for _, f := range got {
				fields = append(fields, f.Field)
			}
			if diff := cmp.Diff(tt.fields, fields); diff != "" {
				t.Fatalf("finding fields (-want +got):\n%s\nfindings: %v", diff, got)
			}
			if len(got) > 0 && !strings.Contains(got[0].Message, tt.contains) {
				t.Errorf("message %q does not contain %q", got[0].Message, tt.contains)
			}
		})
	}
}

// TestValidatePodWithoutNodeName checks the name alone when the node is
// not known.
func TestValidatePodWithoutNodeName(t *testing.T) {
	pod := validPod()
	if got := ValidatePod(pod, ""); len(got) != 0 {
		t.Errorf("ValidatePod(valid, \"\") = %v, want no findings", got)
	}
	pod.Name = "Kube-APIServer"
	got := ValidatePod(pod, "")
	if len(got) != 1 || got[0].Field != "metadata.name" {
		t.Errorf("ValidatePod(upper-case name, \"\") = %v, want one finding at metadata.name", got)
	}
}
