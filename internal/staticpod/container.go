package staticpod

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// envFieldPaths are the pod fields that the downward API can put into an
// environment variable, besides single labels and annotations.
var envFieldPaths = []string{
	"metadata.name", "metadata.namespace", "metadata.uid",
	"spec.nodeName", "spec.serviceAccountName",
	"status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs",
}

// checkContainer checks one init, sidecar or regular container.
func checkContainer(r *report, c podContainer, volumes map[string]*corev1.VolumeSource, hostNetwork bool) {
	p := c.path
	if c.Image == "" {
		r.add(p.Child("image"), "required")
	}
	r.oneOf(p.Child("imagePullPolicy"), string(c.ImagePullPolicy), "Always", "IfNotPresent", "Never")
	r.oneOf(p.Child("terminationMessagePolicy"), string(c.TerminationMessagePolicy), "File", "FallbackToLogsOnError")
	if c.RestartPolicy != nil {
		r.oneOfSet(p.Child("restartPolicy"), string(*c.RestartPolicy), "Always", "OnFailure", "Never")
	}
	checkPorts(r, p.Child("ports"), c.Ports, hostNetwork)
	checkEnv(r, c, volumes)
	checkMounts(r, c, volumes)
	checkResources(r, p.Child("resources"), &c.Resources)
	checkProbes(r, c)
}

// checkPorts checks port numbers, names and protocols. With hostNetwork
// the container port is the host port, so a different hostPort is an error.
func checkPorts(r *report, p *field.Path, ports []corev1.ContainerPort, hostNetwork bool) {
	names := map[string]bool{}
	for i, port := range ports {
		pp := p.Index(i)
		if port.Name != "" {
			r.each(pp.Child("name"), port.Name, validation.IsValidPortName(port.Name))
			if names[port.Name] {
				r.add(pp.Child("name"), "duplicate port name %q", port.Name)
			}
			names[port.Name] = true
		}
		if port.ContainerPort == 0 {
			r.add(pp.Child("containerPort"), "required")
		} else {
			r.each(pp.Child("containerPort"), port.ContainerPort, validation.IsValidPortNum(int(port.ContainerPort)))
		}
		if port.HostPort != 0 {
			r.each(pp.Child("hostPort"), port.HostPort, validation.IsValidPortNum(int(port.HostPort)))
			if hostNetwork && port.HostPort != port.ContainerPort {
				r.add(pp.Child("hostPort"), "must equal containerPort (%d) when hostNetwork is true", port.ContainerPort)
			}
		}
		r.oneOf(pp.Child("protocol"), string(port.Protocol), "TCP", "UDP", "SCTP")
	}
}

// checkHostPorts rejects two ports that bind the same host port, as the
// kubelet does: across the regular containers, which run together, and
// within each init container, which runs on its own.
func checkHostPorts(r *report, all []podContainer, hostNetwork bool) {
	regular := map[string]bool{}
	for _, c := range all {
		bound := regular
		switch c.kind {
		case ephemeralContainer:
			continue
		case initContainer, sidecarContainer:
			bound = map[string]bool{}
		}
		for i, port := range c.Ports {
			hostPort := port.HostPort
			if hostPort == 0 && hostNetwork {
				hostPort = port.ContainerPort
			}
			if hostPort == 0 {
				continue
			}
			protocol := cmp.Or(string(port.Protocol), "TCP")
			key := fmt.Sprintf("%s/%s/%d", port.HostIP, protocol, hostPort)
			if bound[key] {
				r.add(c.path.Child("ports").Index(i), "host port %d/%s is bound twice in this pod", hostPort, protocol)
			}
			bound[key] = true
		}
	}
}

// checkEnv checks variable names and that each value has one source.
func checkEnv(r *report, c podContainer, volumes map[string]*corev1.VolumeSource) {
	for i, env := range c.Env {
		ep := c.path.Child("env").Index(i)
		if env.Name == "" {
			r.add(ep.Child("name"), "required")
		} else {
			r.each(ep.Child("name"), env.Name, validation.IsRelaxedEnvVarName(env.Name))
		}
		from := env.ValueFrom
		if from == nil {
			continue
		}
		if env.Value != "" {
			r.add(ep.Child("valueFrom"), "may not be set when value is set")
		}
		r.exactlyOne(ep.Child("valueFrom"), from, "value source")
		if f := from.FieldRef; f != nil && !validEnvFieldPath(f.FieldPath) {
			r.add(ep.Child("valueFrom", "fieldRef", "fieldPath"), "unsupported value %q: must be one of %s, metadata.labels['<key>'] or metadata.annotations['<key>']",
				f.FieldPath, strings.Join(envFieldPaths, ", "))
		}
		if f := from.ResourceFieldRef; f != nil && f.Resource == "" {
			r.add(ep.Child("valueFrom", "resourceFieldRef", "resource"), "required")
		}
		if f := from.FileKeyRef; f != nil {
			if v := volumes[f.VolumeName]; v == nil || v.EmptyDir == nil {
				r.add(ep.Child("valueFrom", "fileKeyRef", "volumeName"), "must name an emptyDir volume of this pod")
			}
		}
	}
	for i, from := range c.EnvFrom {
		fp := c.path.Child("envFrom").Index(i)
		r.exactlyOne(fp, &from, "source")
		if from.Prefix != "" {
			r.each(fp.Child("prefix"), from.Prefix, validation.IsRelaxedEnvVarName(from.Prefix))
		}
	}
}

// validEnvFieldPath reports whether the downward API can put the pod field
// at fieldPath into an environment variable.
func validEnvFieldPath(fieldPath string) bool {
	if slices.Contains(envFieldPaths, fieldPath) {
		return true
	}
	for _, prefix := range []string{"metadata.labels['", "metadata.annotations['"} {
		if strings.HasPrefix(fieldPath, prefix) && strings.HasSuffix(fieldPath, "']") && len(fieldPath) > len(prefix)+2 {
			return true
		}
	}
	return false
}

// checkMounts checks that mounts and devices refer to volumes of the pod,
// and that mount paths are unique within the container.
func checkMounts(r *report, c podContainer, volumes map[string]*corev1.VolumeSource) {
	mountPaths := map[string]bool{}
	for i, m := range c.VolumeMounts {
		mp := c.path.Child("volumeMounts").Index(i)
		switch {
		case m.Name == "":
			r.add(mp.Child("name"), "required")
		case volumes[m.Name] == nil:
			r.add(mp.Child("name"), "volume %q is not defined in spec.volumes", m.Name)
		}
		switch {
		case m.MountPath == "":
			r.add(mp.Child("mountPath"), "required")
		case mountPaths[m.MountPath]:
			r.add(mp.Child("mountPath"), "%q is mounted twice in this container", m.MountPath)
		}
		mountPaths[m.MountPath] = true
		r.checkRelativePath(mp.Child("subPath"), m.SubPath, false)
		if m.SubPath != "" && m.SubPathExpr != "" {
			r.add(mp.Child("subPathExpr"), "may not be set together with subPath")
		}
		if m.MountPropagation != nil {
			propagation := *m.MountPropagation
			r.oneOfSet(mp.Child("mountPropagation"), string(propagation), "None", "HostToContainer", "Bidirectional")
			privileged := c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged
			if propagation == corev1.MountPropagationBidirectional && !privileged {
				r.add(mp.Child("mountPropagation"), "Bidirectional is available only to privileged containers")
			}
		}
	}
	for i, d := range c.VolumeDevices {
		dp := c.path.Child("volumeDevices").Index(i)
		switch v := volumes[d.Name]; {
		case d.Name == "":
			r.add(dp.Child("name"), "required")
		case v == nil:
			r.add(dp.Child("name"), "volume %q is not defined in spec.volumes", d.Name)
		case v.PersistentVolumeClaim == nil && v.Ephemeral == nil:
			r.add(dp.Child("name"), "a block device needs a persistentVolumeClaim or ephemeral volume, which a static pod cannot use")
		}
		if d.DevicePath == "" {
			r.add(dp.Child("devicePath"), "required")
		}
	}
}

// checkResources requires non-negative quantities and requests no greater
// than limits.
func checkResources(r *report, p *field.Path, res *corev1.ResourceRequirements) {
	for _, name := range slices.Sorted(maps.Keys(res.Limits)) {
		if q := res.Limits[name]; q.Sign() < 0 {
			r.add(p.Child("limits").Key(string(name)), "must not be negative")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(res.Requests)) {
		request := res.Requests[name]
		if request.Sign() < 0 {
			r.add(p.Child("requests").Key(string(name)), "must not be negative")
		}
		if limit, ok := res.Limits[name]; ok && request.Cmp(limit) > 0 {
			r.add(p.Child("requests").Key(string(name)), "%s is more than the limit %s", request.String(), limit.String())
		}
	}
}

// checkProbes checks probes and lifecycle hooks, which an init container
// may have only when it is a sidecar (restartPolicy Always).
func checkProbes(r *report, c podContainer) {
	probes := []struct {
		name           string
		probe          *corev1.Probe
		successIsAlone bool // the kubelet requires successThreshold 1
	}{
		{"livenessProbe", c.LivenessProbe, true},
		{"readinessProbe", c.ReadinessProbe, false},
		{"startupProbe", c.StartupProbe, true},
	}
	for _, pr := range probes {
		if pr.probe == nil {
			continue
		}
		pp := c.path.Child(pr.name)
		if c.kind == initContainer {
			r.add(pp, "forbidden: an init container may have probes only with restartPolicy Always")
			continue
		}
		h := &pr.probe.ProbeHandler
		r.exactlyOne(pp, h, "handler")
		r.checkActions(pp, h.Exec, h.HTTPGet, h.TCPSocket)
		if h.GRPC != nil {
			r.each(pp.Child("grpc", "port"), h.GRPC.Port, validation.IsValidPortNum(int(h.GRPC.Port)))
		}
		for _, n := range []struct {
			name  string
			value int32
		}{
			{"initialDelaySeconds", pr.probe.InitialDelaySeconds},
			{"timeoutSeconds", pr.probe.TimeoutSeconds},
			{"periodSeconds", pr.probe.PeriodSeconds},
			{"successThreshold", pr.probe.SuccessThreshold},
			{"failureThreshold", pr.probe.FailureThreshold},
		} {
			if n.value < 0 {
				r.add(pp.Child(n.name), "must not be negative")
			}
		}
		if pr.successIsAlone && pr.probe.SuccessThreshold > 1 {
			r.add(pp.Child("successThreshold"), "must be 1 for %s", pr.name)
		}
		if g := pr.probe.TerminationGracePeriodSeconds; g != nil && *g <= 0 {
			r.add(pp.Child("terminationGracePeriodSeconds"), "must be greater than 0")
		}
	}
	if c.Lifecycle == nil {
		return
	}
	lp := c.path.Child("lifecycle")
	if c.kind == initContainer {
		r.add(lp, "forbidden: an init container may have lifecycle hooks only with restartPolicy Always")
		return
	}
	hooks := []struct {
		name    string
		handler *corev1.LifecycleHandler
	}{
		{"postStart", c.Lifecycle.PostStart},
		{"preStop", c.Lifecycle.PreStop},
	}
	for _, hook := range hooks {
		if h := hook.handler; h != nil {
			r.exactlyOne(lp.Child(hook.name), h, "handler")
			r.checkActions(lp.Child(hook.name), h.Exec, h.HTTPGet, h.TCPSocket)
		}
	}
}

// checkActions checks the handler actions that probes and hooks share.
func (r *report) checkActions(p *field.Path, exec *corev1.ExecAction, httpGet *corev1.HTTPGetAction, tcp *corev1.TCPSocketAction) {
	if exec != nil && len(exec.Command) == 0 {
		r.add(p.Child("exec", "command"), "required")
	}
	if httpGet != nil {
		r.checkPort(p.Child("httpGet", "port"), httpGet.Port)
	}
	if tcp != nil {
		r.checkPort(p.Child("tcpSocket", "port"), tcp.Port)
	}
}

// checkPort requires a port number, or the name of a container port.
func (r *report) checkPort(p *field.Path, port intstr.IntOrString) {
	if port.Type == intstr.String {
		r.each(p, port.StrVal, validation.IsValidPortName(port.StrVal))
		return
	}
	r.each(p, port.IntVal, validation.IsValidPortNum(int(port.IntVal)))
}
