package staticpod

import (
	"maps"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// maxAnnotationsSize is the most that the keys and values of a pod's
// annotations may hold together.
const maxAnnotationsSize = 256 << 10

// ValidatePod returns every reason the kubelet on node nodeName would
// reject pod as a static pod: the pod create validation it runs, the
// fields kubeboot refuses in a static pod, and the rule that a static pod
// may not reference an API object. No findings means accepted.
//
// The kubelet names the pod "<name>-<nodeName>", so that is what must be a
// valid RFC 1123 subdomain. An empty nodeName means the node is not known;
// the name is then checked on its own.
//
// Empty fields that the API server's defaulting fills in (restartPolicy,
// dnsPolicy, imagePullPolicy, protocol, and the like) are accepted, because
// the kubelet decodes manifests with the same defaulting.
func ValidatePod(pod *corev1.Pod, nodeName string) []Finding {
	var r report
	checkMetadata(&r, &pod.ObjectMeta, nodeName)
	checkSpec(&r, &pod.Spec)
	checkPodFields(&r, pod)
	checkAPIReferences(&r, &pod.Spec)
	return r
}

// checkMetadata checks the name as the kubelet will rewrite it, and the
// namespace, labels and annotations.
func checkMetadata(r *report, m *metav1.ObjectMeta, nodeName string) {
	p := field.NewPath("metadata")
	switch {
	case m.Name == "":
		r.add(p.Child("name"), "required: the kubelet rejects a static pod without a name")
	case nodeName != "":
		// The kubelet lower-cases the node name before appending it.
		full := m.Name + "-" + strings.ToLower(nodeName)
		for _, msg := range content.IsDNS1123Subdomain(full) {
			r.add(p.Child("name"), "%q, the name with the node-name suffix the kubelet appends, is not a valid RFC 1123 subdomain: %s", full, msg)
		}
	default:
		r.each(p.Child("name"), m.Name, content.IsDNS1123Subdomain(m.Name))
	}
	if m.Namespace != "" {
		r.each(p.Child("namespace"), m.Namespace, content.IsDNS1123Label(m.Namespace))
	}
	checkLabels(r, p.Child("labels"), m.Labels)
	size := 0
	for _, key := range slices.Sorted(maps.Keys(m.Annotations)) {
		// Annotation keys are label keys in which case does not matter.
		r.each(p.Child("annotations").Key(key), key, content.IsLabelKey(strings.ToLower(key)))
		size += len(key) + len(m.Annotations[key])
	}
	if size > maxAnnotationsSize {
		r.add(p.Child("annotations"), "too long: %d bytes, may hold at most %d", size, maxAnnotationsSize)
	}
}

// checkSpec checks the pod-wide fields, then every container.
func checkSpec(r *report, spec *corev1.PodSpec) {
	p := field.NewPath("spec")
	if len(spec.Containers) == 0 {
		r.add(p.Child("containers"), "required: a pod needs at least one container")
	}
	if len(spec.EphemeralContainers) > 0 {
		r.add(p.Child("ephemeralContainers"), "forbidden: ephemeral containers may not be set when a pod is created, and the kubelet creates static pods")
	}
	r.oneOf(p.Child("restartPolicy"), string(spec.RestartPolicy), "Always", "OnFailure", "Never")
	r.oneOf(p.Child("dnsPolicy"), string(spec.DNSPolicy), "ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")
	if spec.DNSPolicy == corev1.DNSNone && spec.DNSConfig == nil {
		r.add(p.Child("dnsConfig"), "required when dnsPolicy is None")
	}
	if spec.Hostname != "" {
		r.each(p.Child("hostname"), spec.Hostname, content.IsDNS1123Label(spec.Hostname))
	}
	if spec.Subdomain != "" {
		r.each(p.Child("subdomain"), spec.Subdomain, content.IsDNS1123Label(spec.Subdomain))
	}

	volumes := checkVolumes(r, p.Child("volumes"), spec.Volumes)
	all := containers(spec)
	checkContainerNames(r, all)
	for _, c := range all {
		// Ephemeral containers are rejected as a whole above; their API
		// references are still reported by checkAPIReferences.
		if c.kind != ephemeralContainer {
			checkContainer(r, c, volumes, spec.HostNetwork)
			checkContainerFields(r, c, spec)
		}
	}
	checkHostPorts(r, all, spec.HostNetwork)
}

// containerKind tells the container lists apart, because the kubelet
// treats each differently.
type containerKind int

const (
	regularContainer containerKind = iota
	initContainer                  // runs to completion before the regular containers start
	sidecarContainer               // an init container with restartPolicy Always: runs alongside them
	ephemeralContainer
)

// podContainer is one container of any kind, with its field path.
type podContainer struct {
	*corev1.Container
	path *field.Path
	kind containerKind
}

// containers lists every container of spec in the kubelet's order: init
// containers, containers, then ephemeral containers.
func containers(spec *corev1.PodSpec) []podContainer {
	p := field.NewPath("spec")
	var all []podContainer
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		kind := initContainer
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			kind = sidecarContainer
		}
		all = append(all, podContainer{c, p.Child("initContainers").Index(i), kind})
	}
	for i := range spec.Containers {
		all = append(all, podContainer{&spec.Containers[i], p.Child("containers").Index(i), regularContainer})
	}
	for i := range spec.EphemeralContainers {
		// An ephemeral container has a container's fields under another
		// type, so it converts to one.
		c := corev1.Container(spec.EphemeralContainers[i].EphemeralContainerCommon)
		all = append(all, podContainer{&c, p.Child("ephemeralContainers").Index(i), ephemeralContainer})
	}
	return all
}

// checkContainerNames requires a DNS-1123 label as each container's name,
// unique across all the container lists.
func checkContainerNames(r *report, all []podContainer) {
	first := map[string]*field.Path{}
	for _, c := range all {
		p := c.path.Child("name")
		if c.Name == "" {
			r.add(p, "required")
			continue
		}
		r.each(p, c.Name, content.IsDNS1123Label(c.Name))
		if other, dup := first[c.Name]; dup {
			r.add(p, "duplicate container name %q, also used by %s: names must be unique across initContainers and containers", c.Name, other)
			continue
		}
		first[c.Name] = p
	}
}

// setFields returns the JSON names of the non-nil pointer fields of the
// struct that oneOf points to. Kubernetes expresses "exactly one of" as a
// struct of pointers (a volume's source, a probe's handler), so this says
// which were chosen. Reflection keeps working when Kubernetes adds a field.
func setFields(oneOf any) []string {
	v := reflect.ValueOf(oneOf).Elem()
	var names []string
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
			names = append(names, name)
		}
	}
	return names
}

// exactlyOne records a finding unless exactly one field of oneOf is set;
// what names the kind of field, such as "volume source".
func (r *report) exactlyOne(p *field.Path, oneOf any, what string) {
	switch set := setFields(oneOf); len(set) {
	case 0:
		r.add(p, "must specify a %s", what)
	case 1:
	default:
		r.add(p, "may specify only one %s, has %s", what, strings.Join(set, ", "))
	}
}
