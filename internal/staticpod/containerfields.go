package staticpod

import (
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// httpHeaderName is the name of an HTTP header a probe sends.
var httpHeaderName = regexp.MustCompile(`^[-A-Za-z0-9]+$`)

// linuxSignals are the signals a container's lifecycle.stopSignal may name
// on Linux.
var linuxSignals = func() []string {
	names := []string{
		"SIGABRT", "SIGALRM", "SIGBUS", "SIGCHLD", "SIGCLD", "SIGCONT", "SIGFPE", "SIGHUP",
		"SIGILL", "SIGINT", "SIGIO", "SIGIOT", "SIGKILL", "SIGPIPE", "SIGPOLL", "SIGPROF",
		"SIGPWR", "SIGQUIT", "SIGSEGV", "SIGSTKFLT", "SIGSTOP", "SIGSYS", "SIGTERM", "SIGTRAP",
		"SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGURG", "SIGUSR1", "SIGUSR2", "SIGVTALRM", "SIGWINCH",
		"SIGXCPU", "SIGXFSZ", "SIGRTMIN", "SIGRTMAX",
	}
	for i := 1; i <= 15; i++ {
		names = append(names, "SIGRTMIN+"+strconv.Itoa(i), "SIGRTMAX-"+strconv.Itoa(i))
	}
	return names
}()

// checkContainerFields checks the container fields besides ports, env,
// mounts, resources' amounts and probes' actions, field by field.
func checkContainerFields(r *report, c podContainer, spec *corev1.PodSpec) {
	p := c.path
	if c.Image != strings.TrimSpace(c.Image) {
		r.add(p.Child("image"), "invalid value %q: must not have leading or trailing whitespace", c.Image)
	}
	checkResourceNames(r, p.Child("resources"), &c.Resources)
	checkResizePolicy(r, p.Child("resizePolicy"), c.ResizePolicy)
	checkRestartRules(r, c)
	checkStopSignal(r, c, spec)
	checkContainerSecurityContext(r, p.Child("securityContext"), c.SecurityContext)
	for _, probe := range []struct {
		name  string
		probe *corev1.Probe
	}{{"livenessProbe", c.LivenessProbe}, {"readinessProbe", c.ReadinessProbe}, {"startupProbe", c.StartupProbe}} {
		if probe.probe != nil {
			checkHTTPGet(r, p.Child(probe.name, "httpGet"), probe.probe.HTTPGet)
		}
	}
	if c.ReadinessProbe != nil && c.ReadinessProbe.TerminationGracePeriodSeconds != nil {
		r.add(p.Child("readinessProbe", "terminationGracePeriodSeconds"), "may not be set: a failing readiness probe never stops the container")
	}
	if l := c.Lifecycle; l != nil {
		checkHTTPGet(r, p.Child("lifecycle", "postStart", "httpGet"), handlerHTTPGet(l.PostStart))
		checkHTTPGet(r, p.Child("lifecycle", "preStop", "httpGet"), handlerHTTPGet(l.PreStop))
	}
	for i, m := range c.VolumeMounts {
		checkMountOptions(r, p.Child("volumeMounts").Index(i), m)
	}
}

// handlerHTTPGet returns the HTTP action of a lifecycle hook, if any.
func handlerHTTPGet(h *corev1.LifecycleHandler) *corev1.HTTPGetAction {
	if h == nil {
		return nil
	}
	return h.HTTPGet
}

// checkHTTPGet checks an HTTP action's scheme and header names.
func checkHTTPGet(r *report, p *field.Path, h *corev1.HTTPGetAction) {
	if h == nil {
		return
	}
	r.oneOf(p.Child("scheme"), string(h.Scheme), "HTTP", "HTTPS")
	for i, header := range h.HTTPHeaders {
		if !httpHeaderName.MatchString(header.Name) {
			r.add(p.Child("httpHeaders").Index(i).Child("name"), "invalid value %q: must be an HTTP header name of letters, digits and '-'", header.Name)
		}
	}
}

// checkResourceNames requires each resource name to be a standard
// container resource (cpu, memory, ephemeral-storage, hugepages-<size>) or
// an extended resource named with a domain, and an extended resource to be
// a whole number whose request equals its limit.
func checkResourceNames(r *report, p *field.Path, res *corev1.ResourceRequirements) {
	for _, list := range []struct {
		name string
		list corev1.ResourceList
	}{{"limits", res.Limits}, {"requests", res.Requests}} {
		for _, name := range slices.Sorted(maps.Keys(list.list)) {
			np := p.Child(list.name).Key(string(name))
			if msgs := validation.IsQualifiedName(string(name)); len(msgs) > 0 {
				r.each(np, name, msgs)
				continue
			}
			switch {
			case strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix):
				checkHugePages(r, np, name, list.list[name], res)
			case !strings.Contains(string(name), "/"):
				if !standardContainerResource(name) {
					r.add(np, "unsupported resource %q: must be cpu, memory, ephemeral-storage, hugepages-<size>, or an extended resource named with a domain", name)
				}
			default:
				// Once per resource: from requests if it is there.
				if _, requested := res.Requests[name]; list.name == "requests" || !requested {
					checkExtendedResource(r, np, name, res)
				}
			}
		}
	}
}

// standardContainerResource reports whether a container may request name
// without a domain.
func standardContainerResource(name corev1.ResourceName) bool {
	switch name {
	case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
		return true
	}
	return strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix)
}

// checkHugePages requires an amount of huge pages to be a whole number
// of pages, and a request to come with an equal limit: huge pages cannot
// be overcommitted.
func checkHugePages(r *report, p *field.Path, name corev1.ResourceName, q resource.Quantity, res *corev1.ResourceRequirements) {
	size, err := resource.ParseQuantity(strings.TrimPrefix(string(name), corev1.ResourceHugePagesPrefix))
	if err != nil || size.Sign() <= 0 {
		r.add(p, "unsupported resource %q: the page size after hugepages- must be a quantity such as 2Mi", name)
		return
	}
	if q.Value()%size.Value() != 0 {
		r.add(p, "invalid value %s: must be a whole number of %s pages", q.String(), size.String())
	}
	if _, limited := res.Limits[name]; !limited {
		r.add(p, "%s needs a limit: huge pages cannot be overcommitted", name)
	}
}

// checkExtendedResource checks one resource named with a domain.
func checkExtendedResource(r *report, p *field.Path, name corev1.ResourceName, res *corev1.ResourceRequirements) {
	domain, _, _ := strings.Cut(string(name), "/")
	if domain == "kubernetes.io" || strings.HasSuffix(domain, ".kubernetes.io") || strings.HasPrefix(string(name), "requests.") {
		r.add(p, "unsupported resource %q: an extended resource may not use a kubernetes.io domain or the requests. prefix", name)
		return
	}
	limit, hasLimit := res.Limits[name]
	request, hasRequest := res.Requests[name]
	switch {
	case hasRequest && !hasLimit:
		r.add(p, "extended resource %q needs a limit equal to its request", name)
	case hasRequest && request.Cmp(limit) != 0:
		r.add(p, "extended resource %q needs its request equal to its limit", name)
	}
	for _, q := range []resource.Quantity{limit, request} {
		if q.MilliValue()%1000 != 0 {
			r.add(p, "extended resource %q must be a whole number", name)
			return
		}
	}
}

// checkResizePolicy checks each resize policy: a resource that can be
// resized, and what resizing it does.
func checkResizePolicy(r *report, p *field.Path, policies []corev1.ContainerResizePolicy) {
	seen := map[corev1.ResourceName]bool{}
	for i, policy := range policies {
		pp := p.Index(i)
		r.oneOfSet(pp.Child("resourceName"), string(policy.ResourceName), "cpu", "memory")
		if seen[policy.ResourceName] {
			r.add(pp.Child("resourceName"), "duplicate resize policy for %q", policy.ResourceName)
		}
		seen[policy.ResourceName] = true
		r.oneOfSet(pp.Child("restartPolicy"), string(policy.RestartPolicy), "NotRequired", "RestartContainer")
	}
}

// checkRestartRules checks a container's restart rules: they need the
// container's own restartPolicy, and each names an action and exit codes.
func checkRestartRules(r *report, c podContainer) {
	if len(c.RestartPolicyRules) == 0 {
		return
	}
	p := c.path.Child("restartPolicyRules")
	if c.RestartPolicy == nil {
		r.add(c.path.Child("restartPolicy"), "required when restartPolicyRules is set")
	}
	for i, rule := range c.RestartPolicyRules {
		rp := p.Index(i)
		r.oneOfSet(rp.Child("action"), string(rule.Action), "Restart", "RestartAllContainers")
		if rule.ExitCodes == nil {
			r.add(rp.Child("exitCodes"), "required")
			continue
		}
		r.oneOfSet(rp.Child("exitCodes", "operator"), string(rule.ExitCodes.Operator), "In", "NotIn")
		seen := map[int32]bool{}
		for j, code := range rule.ExitCodes.Values {
			if code < 0 || code > 255 {
				r.add(rp.Child("exitCodes", "values").Index(j), "invalid value %d: must be an exit code between 0 and 255", code)
			}
			if seen[code] {
				r.add(rp.Child("exitCodes", "values").Index(j), "duplicate exit code %d", code)
			}
			seen[code] = true
		}
	}
}

// checkStopSignal requires spec.os.name with a stop signal, and a Linux
// signal's name.
func checkStopSignal(r *report, c podContainer, spec *corev1.PodSpec) {
	if c.Lifecycle == nil || c.Lifecycle.StopSignal == nil {
		return
	}
	p := c.path.Child("lifecycle", "stopSignal")
	if spec.OS == nil || spec.OS.Name == "" {
		r.add(p, "may be set only with spec.os.name: linux")
		return
	}
	r.oneOfSet(p, string(*c.Lifecycle.StopSignal), linuxSignals...)
}

// checkContainerSecurityContext checks a container's IDs, /proc mount,
// profiles, and that a privileged container may escalate privileges; as
// the pod's, its windowsOptions are refused (see unusedFields).
func checkContainerSecurityContext(r *report, p *field.Path, sc *corev1.SecurityContext) {
	if sc == nil {
		return
	}
	if sc.WindowsOptions != nil {
		r.add(p.Child("windowsOptions"), "not supported in a static pod: it applies only on Windows nodes, and kubeboot's nodes are Linux; remove it")
	}
	r.checkID(p.Child("runAsUser"), sc.RunAsUser)
	r.checkID(p.Child("runAsGroup"), sc.RunAsGroup)
	if sc.ProcMount != nil {
		r.oneOfSet(p.Child("procMount"), string(*sc.ProcMount), "Default", "Unmasked")
		if *sc.ProcMount == corev1.UnmaskedProcMount {
			r.add(p.Child("procMount"), "Unmasked needs a user namespace (spec.securityContext.hostUsers: false), which kubeboot's static pods do not use")
		}
	}
	noEscalation := sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation
	if noEscalation && sc.Privileged != nil && *sc.Privileged {
		r.add(p.Child("allowPrivilegeEscalation"), "may not be false when privileged is true")
	}
	if noEscalation && sc.Capabilities != nil && slices.Contains(sc.Capabilities.Add, "CAP_SYS_ADMIN") {
		r.add(p.Child("allowPrivilegeEscalation"), "may not be false when capabilities.add has CAP_SYS_ADMIN")
	}
	checkProfiles(r, p, sc.SeccompProfile, sc.AppArmorProfile)
}

// checkMountOptions checks a mount's subPathExpr and recursiveReadOnly.
func checkMountOptions(r *report, p *field.Path, m corev1.VolumeMount) {
	r.checkRelativePath(p.Child("subPathExpr"), m.SubPathExpr, false)
	if m.RecursiveReadOnly == nil {
		return
	}
	rro := *m.RecursiveReadOnly
	r.oneOfSet(p.Child("recursiveReadOnly"), string(rro), "Disabled", "IfPossible", "Enabled")
	if rro == corev1.RecursiveReadOnlyDisabled {
		return
	}
	if !m.ReadOnly {
		r.add(p.Child("recursiveReadOnly"), "needs readOnly: true")
	}
	if m.MountPropagation != nil && *m.MountPropagation != corev1.MountPropagationNone {
		r.add(p.Child("recursiveReadOnly"), "needs mountPropagation None")
	}
}
