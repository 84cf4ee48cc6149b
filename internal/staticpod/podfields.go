package staticpod

import (
	"maps"
	"math"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// DNS limits of a pod's dnsConfig: the resolver's own limits, which the
// kubelet enforces when it writes the pod's resolv.conf.
const (
	maxNameservers    = 3
	maxSearches       = 32
	maxSearchListSize = 2048
)

// searchDomain is one DNS search domain: labels of lower-case letters,
// digits, '-' and '_', each of which may start with '_'.
var searchDomain = regexp.MustCompile(`^_?[a-z0-9]([-_a-z0-9]*[a-z0-9])?(\._?[a-z0-9]([-_a-z0-9]*[a-z0-9])?)*$`)

// unusedField is a field that only the scheduler, a controller or a
// Windows node acts on. A static pod is placed by its manifest's directory
// and owned by its kubelet, so kubeboot refuses these fields rather than
// check them: each one is either ignored or, when malformed, a reason for
// the kubelet to drop the pod.
type unusedField struct {
	path string
	set  func(*corev1.Pod) bool
	why  string
}

// unusedFields lists them.
var unusedFields = []unusedField{
	{"metadata.generateName", func(p *corev1.Pod) bool { return p.GenerateName != "" }, "the kubelet names a static pod from metadata.name"},
	{"metadata.ownerReferences", func(p *corev1.Pod) bool { return len(p.OwnerReferences) > 0 }, "a static pod belongs to its node, not to an API object"},
	{"metadata.finalizers", func(p *corev1.Pod) bool { return len(p.Finalizers) > 0 }, "the kubelet removes a static pod when its file goes; no controller finalizes it"},
	{"spec.affinity", func(p *corev1.Pod) bool { return p.Spec.Affinity != nil }, "the scheduler never places a static pod"},
	{"spec.topologySpreadConstraints", func(p *corev1.Pod) bool { return len(p.Spec.TopologySpreadConstraints) > 0 }, "the scheduler never places a static pod"},
	{"spec.schedulingGates", func(p *corev1.Pod) bool { return len(p.Spec.SchedulingGates) > 0 }, "the scheduler never places a static pod"},
	{"spec.schedulingGroup", func(p *corev1.Pod) bool { return p.Spec.SchedulingGroup != nil }, "the scheduler never places a static pod"},
	{"spec.overhead", func(p *corev1.Pod) bool { return p.Spec.Overhead != nil }, "the API server sets it from a RuntimeClass"},
	{"spec.securityContext.windowsOptions", func(p *corev1.Pod) bool {
		return p.Spec.SecurityContext != nil && p.Spec.SecurityContext.WindowsOptions != nil
	}, "it applies only on Windows nodes, and kubeboot's nodes are Linux"},
}

// checkPodFields checks the pod-wide fields besides containers and
// volumes, field by field.
func checkPodFields(r *report, pod *corev1.Pod) {
	for _, f := range unusedFields {
		if f.set(pod) {
			r.add(field.NewPath(f.path), "not supported in a static pod: %s; remove it", f.why)
		}
	}
	if pod.Generation < 0 {
		r.add(field.NewPath("metadata", "generation"), "must not be negative")
	}
	spec := &pod.Spec
	p := field.NewPath("spec")
	if d := spec.ActiveDeadlineSeconds; d != nil && (*d < 1 || *d > math.MaxInt32) {
		r.add(p.Child("activeDeadlineSeconds"), "invalid value %d: must be between 1 and %d", *d, math.MaxInt32)
	}
	if spec.OS != nil && spec.OS.Name != corev1.Linux {
		r.add(p.Child("os", "name"), "unsupported value %q: must be linux, the OS of kubeboot's nodes", spec.OS.Name)
	}
	checkLabels(r, p.Child("nodeSelector"), spec.NodeSelector)
	r.subdomain(p.Child("priorityClassName"), spec.PriorityClassName)
	if spec.RuntimeClassName != nil {
		r.each(p.Child("runtimeClassName"), *spec.RuntimeClassName, content.IsDNS1123Subdomain(*spec.RuntimeClassName))
	}
	if spec.PreemptionPolicy != nil {
		r.oneOfSet(p.Child("preemptionPolicy"), string(*spec.PreemptionPolicy), "PreemptLowerPriority", "Never")
	}
	for i, g := range spec.ReadinessGates {
		r.each(p.Child("readinessGates").Index(i).Child("conditionType"), g.ConditionType, validation.IsQualifiedName(string(g.ConditionType)))
	}
	checkHostnameOverride(r, p.Child("hostnameOverride"), spec)
	checkPodResources(r, p.Child("resources"), spec)
	checkDNSConfig(r, p.Child("dnsConfig"), spec)
	checkHostAliases(r, p.Child("hostAliases"), spec.HostAliases)
	checkTolerations(r, p.Child("tolerations"), spec.Tolerations)
	checkPodSecurityContext(r, p.Child("securityContext"), spec)
}

// maxHostnameOverride is the longest hostname a pod may override its own
// with.
const maxHostnameOverride = 64

// checkHostnameOverride checks the hostname that replaces the pod's
// own: a subdomain, only when the pod has a hostname of its own.
func checkHostnameOverride(r *report, p *field.Path, spec *corev1.PodSpec) {
	h := spec.HostnameOverride
	if h == nil {
		return
	}
	if spec.HostNetwork {
		r.add(p, "may not be set when hostNetwork is true: the pod has the node's hostname")
	}
	if spec.SetHostnameAsFQDN != nil && *spec.SetHostnameAsFQDN {
		r.add(p, "may not be set when setHostnameAsFQDN is true")
	}
	if len(*h) > maxHostnameOverride {
		r.add(p, "too long: %d characters, may have at most %d", len(*h), maxHostnameOverride)
	}
	r.each(p, *h, content.IsDNS1123Subdomain(*h))
}

// checkPodResources checks pod-level resources: only cpu, memory and huge
// pages, no claims, the amounts as for a container, and room for the
// containers' own.
func checkPodResources(r *report, p *field.Path, spec *corev1.PodSpec) {
	res := spec.Resources
	if res == nil {
		return
	}
	if len(res.Claims) > 0 {
		r.add(p.Child("claims"), "not supported at pod level: claims belong to containers")
	}
	for _, list := range []struct {
		name string
		list corev1.ResourceList
	}{{"limits", res.Limits}, {"requests", res.Requests}} {
		for _, name := range slices.Sorted(maps.Keys(list.list)) {
			np := p.Child(list.name).Key(string(name))
			switch {
			case strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix):
				checkHugePages(r, np, name, list.list[name], res)
				if !hasCPUOrMemory(res) {
					r.add(np, "huge pages need a cpu or memory request or limit too")
				}
			case name != corev1.ResourceCPU && name != corev1.ResourceMemory:
				r.add(np, "unsupported resource %q at pod level: must be cpu, memory or hugepages-<size>", name)
			}
		}
	}
	checkResources(r, p, res)
	checkPodResourceRoom(r, p, spec)
}

// hasCPUOrMemory reports whether res requests or limits cpu or memory.
func hasCPUOrMemory(res *corev1.ResourceRequirements) bool {
	for _, list := range []corev1.ResourceList{res.Requests, res.Limits} {
		if _, ok := list[corev1.ResourceCPU]; ok {
			return true
		}
		if _, ok := list[corev1.ResourceMemory]; ok {
			return true
		}
	}
	return false
}

// checkPodResourceRoom requires the pod's requests to cover its
// containers' (which they default to when unset) and its limits to cover
// its requests and each container's limit.
func checkPodResourceRoom(r *report, p *field.Path, spec *corev1.PodSpec) {
	res := spec.Resources
	needed := containerRequests(spec)
	for _, name := range slices.Sorted(maps.Keys(needed)) {
		total := needed[name]
		request, set := res.Requests[name]
		if set && request.Cmp(total) < 0 {
			r.add(p.Child("requests").Key(string(name)), "%s is less than the containers' requests, %s", request.String(), total.String())
		}
		if !set {
			request = total
		}
		if limit, ok := res.Limits[name]; ok && request.Cmp(limit) > 0 {
			r.add(p.Child("limits").Key(string(name)), "%s is less than the pod's request, %s (the containers' requests when the pod sets none)", limit.String(), request.String())
		}
	}
	for _, c := range containers(spec) {
		for _, name := range slices.Sorted(maps.Keys(c.Resources.Limits)) {
			own := c.Resources.Limits[name]
			if limit, ok := res.Limits[name]; ok && own.Cmp(limit) > 0 {
				r.add(c.path.Child("resources", "limits").Key(string(name)), "more than the pod's limit, %s", limit.String())
			}
		}
	}
}

// containerRequests adds up what the pod's containers request at once:
// the regular and sidecar containers together, or the largest init
// container alone, whichever is more.
func containerRequests(spec *corev1.PodSpec) corev1.ResourceList {
	together := corev1.ResourceList{}
	alone := corev1.ResourceList{}
	for _, c := range containers(spec) {
		for name, q := range c.Resources.Requests {
			switch c.kind {
			case regularContainer, sidecarContainer:
				sum := together[name]
				sum.Add(q)
				together[name] = sum
			case initContainer:
				if q.Cmp(alone[name]) > 0 {
					alone[name] = q
				}
			}
		}
	}
	for name, q := range alone {
		if q.Cmp(together[name]) > 0 {
			together[name] = q
		}
	}
	return together
}

// subdomain records a finding unless value is empty or an RFC 1123
// subdomain.
func (r *report) subdomain(p *field.Path, value string) {
	if value != "" {
		r.each(p, value, content.IsDNS1123Subdomain(value))
	}
}

// checkLabels checks label keys and values, as in metadata.labels and
// spec.nodeSelector.
func checkLabels(r *report, p *field.Path, labels map[string]string) {
	for _, key := range slices.Sorted(maps.Keys(labels)) {
		r.each(p.Key(key), key, content.IsLabelKey(key))
		r.each(p.Key(key), labels[key], content.IsLabelValue(labels[key]))
	}
}

// checkDNSConfig checks the nameservers, search domains and options that
// the kubelet writes to the pod's resolv.conf.
func checkDNSConfig(r *report, p *field.Path, spec *corev1.PodSpec) {
	dns := spec.DNSConfig
	if dns == nil {
		return
	}
	if spec.DNSPolicy == corev1.DNSNone && len(dns.Nameservers) == 0 {
		r.add(p.Child("nameservers"), "required when dnsPolicy is None: at least one nameserver")
	}
	if len(dns.Nameservers) > maxNameservers {
		r.add(p.Child("nameservers"), "too many: %d, may have at most %d", len(dns.Nameservers), maxNameservers)
	}
	for i, ns := range dns.Nameservers {
		r.ip(p.Child("nameservers").Index(i), ns)
	}
	if len(dns.Searches) > maxSearches {
		r.add(p.Child("searches"), "too many: %d, may have at most %d", len(dns.Searches), maxSearches)
	}
	if n := len(strings.Join(dns.Searches, " ")); n > maxSearchListSize {
		r.add(p.Child("searches"), "too long: %d characters with the spaces between them, may have at most %d", n, maxSearchListSize)
	}
	for i, s := range dns.Searches {
		name := strings.TrimSuffix(s, ".")
		if s != "." && (len(name) > validation.DNS1123SubdomainMaxLength || !searchDomain.MatchString(name)) {
			r.add(p.Child("searches").Index(i), "invalid value %q: must be a domain name of at most %d characters: labels of lower-case letters, digits, '-' and '_', separated by '.'", s, validation.DNS1123SubdomainMaxLength)
		}
	}
	for i, o := range dns.Options {
		if o.Name == "" {
			r.add(p.Child("options").Index(i).Child("name"), "required")
		}
	}
}

// ip records a finding unless value is an IPv4 or IPv6 address.
func (r *report) ip(p *field.Path, value string) {
	if _, err := netip.ParseAddr(value); err != nil || strings.Contains(value, "%") {
		r.add(p, "invalid value %q: must be an IP address, such as 10.9.8.7 or 2001:db8::ffff", value)
	}
}

// checkHostAliases checks the entries the kubelet adds to the pod's
// /etc/hosts.
func checkHostAliases(r *report, p *field.Path, aliases []corev1.HostAlias) {
	for i, a := range aliases {
		ap := p.Index(i)
		r.ip(ap.Child("ip"), a.IP)
		for j, h := range a.Hostnames {
			r.each(ap.Child("hostnames").Index(j), h, content.IsDNS1123Subdomain(h))
		}
	}
}

// checkTolerations checks each toleration's key, operator, value and
// effect.
func checkTolerations(r *report, p *field.Path, tolerations []corev1.Toleration) {
	for i, t := range tolerations {
		tp := p.Index(i)
		if t.Key != "" {
			r.each(tp.Child("key"), t.Key, validation.IsQualifiedName(t.Key))
		}
		if t.Key == "" && t.Operator != corev1.TolerationOpExists {
			r.add(tp.Child("operator"), "must be Exists when key is empty, which matches every taint")
		}
		r.oneOf(tp.Child("operator"), string(t.Operator), "Equal", "Exists")
		switch t.Operator {
		case corev1.TolerationOpExists:
			if t.Value != "" {
				r.add(tp.Child("value"), "must be empty when operator is Exists")
			}
		default:
			r.each(tp.Child("value"), t.Value, content.IsLabelValue(t.Value))
		}
		r.oneOf(tp.Child("effect"), string(t.Effect), "NoSchedule", "PreferNoSchedule", "NoExecute")
		if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
			r.add(tp.Child("tolerationSeconds"), "may be set only when effect is NoExecute")
		}
	}
}

// checkID requires a user or group ID, when set, to be between 0 and
// 2^31-1.
func (r *report) checkID(p *field.Path, value *int64) {
	if value != nil && (*value < 0 || *value > math.MaxInt32) {
		r.add(p, "invalid value %d: must be between 0 and %d", *value, math.MaxInt32)
	}
}

// checkPodSecurityContext checks the pod's security context: IDs, the
// policies, sysctls and the seccomp and AppArmor profiles.
func checkPodSecurityContext(r *report, p *field.Path, spec *corev1.PodSpec) {
	sc := spec.SecurityContext
	if sc == nil {
		return
	}
	r.checkID(p.Child("runAsUser"), sc.RunAsUser)
	r.checkID(p.Child("runAsGroup"), sc.RunAsGroup)
	r.checkID(p.Child("fsGroup"), sc.FSGroup)
	for i := range sc.SupplementalGroups {
		r.checkID(p.Child("supplementalGroups").Index(i), &sc.SupplementalGroups[i])
	}
	if sc.FSGroupChangePolicy != nil {
		r.oneOfSet(p.Child("fsGroupChangePolicy"), string(*sc.FSGroupChangePolicy), "OnRootMismatch", "Always")
	}
	if sc.SELinuxChangePolicy != nil {
		r.oneOfSet(p.Child("seLinuxChangePolicy"), string(*sc.SELinuxChangePolicy), "Recursive", "MountOption")
	}
	if sc.SupplementalGroupsPolicy != nil {
		r.oneOfSet(p.Child("supplementalGroupsPolicy"), string(*sc.SupplementalGroupsPolicy), "Merge", "Strict")
	}
	seen := map[string]bool{}
	for i, s := range sc.Sysctls {
		sp := p.Child("sysctls").Index(i).Child("name")
		switch {
		case s.Name == "":
			r.add(sp, "required")
		case len(s.Name) > validation.DNS1123SubdomainMaxLength || !sysctlName.MatchString(s.Name):
			r.add(sp, "invalid value %q: must be a sysctl name such as net.ipv4.ip_forward or kernel/shm_rmid_forced", s.Name)
		case seen[s.Name]:
			r.add(sp, "duplicate sysctl %q", s.Name)
		}
		seen[s.Name] = true
	}
	checkProfiles(r, p, sc.SeccompProfile, sc.AppArmorProfile)
}

// sysctlName is a sysctl's name, with '.' or '/' between its parts.
var sysctlName = regexp.MustCompile(`^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$`)

// checkProfiles checks a seccomp and an AppArmor profile: a type, and a
// localhost profile exactly when the type is Localhost.
func checkProfiles(r *report, p *field.Path, seccomp *corev1.SeccompProfile, apparmor *corev1.AppArmorProfile) {
	if seccomp != nil {
		checkProfile(r, p.Child("seccompProfile"), string(seccomp.Type), seccomp.LocalhostProfile)
	}
	if apparmor != nil {
		checkProfile(r, p.Child("appArmorProfile"), string(apparmor.Type), apparmor.LocalhostProfile)
	}
}

// checkProfile checks one profile's type and localhost profile.
func checkProfile(r *report, p *field.Path, typ string, localhost *string) {
	if typ == "" {
		r.add(p.Child("type"), "required when %s is set", p)
	} else {
		r.oneOfSet(p.Child("type"), typ, "Localhost", "RuntimeDefault", "Unconfined")
	}
	switch {
	case typ == "Localhost" && (localhost == nil || *localhost == ""):
		r.add(p.Child("localhostProfile"), "required when type is Localhost")
	case typ != "Localhost" && localhost != nil:
		r.add(p.Child("localhostProfile"), "may be set only when type is Localhost")
	}
}
