package health

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
)

// NotHealthyError is Wait's error when time runs out. Its text explains,
// for every component that is not healthy, what was checked, the last
// error, the likely cause and the commands to run next.
type NotHealthyError struct {
	// Waited is how long Wait waited.
	Waited time.Duration
	// Healthy are the components that became healthy.
	Healthy []string
	// Unhealthy are the other components, in the probes' order.
	Unhealthy []Unhealthy
	// ManifestsDir is the kubelet's manifest directory.
	ManifestsDir string
	// ForeignFiles are files the kubelet also runs from ManifestsDir.
	ForeignFiles []string
	// Logs are, by component, the state and the last log lines of its
	// newest container, where the container runtime could tell.
	Logs map[string]ContainerLog
}

// ContainerLog is what the container runtime says of a component's newest
// container.
type ContainerLog struct {
	// State is "running", "exited with code 1 (Error)", ...
	State string
	// Tail is the last lines of its log.
	Tail string
}

// Unhealthy is the last known state of a component that did not become
// healthy.
type Unhealthy struct {
	// Component is the component's name.
	Component string
	// Target is what was checked.
	Target string
	// External marks a component that does not run on this node.
	External bool
	// Err is the last check's error; nil when no check finished in time.
	Err error
}

// ExitCode makes a control plane that is not healthy in time exit with 4.
func (e *NotHealthyError) ExitCode() int { return exit.NotHealthy }

// Error is the full diagnostic, one finding per line.
func (e *NotHealthyError) Error() string {
	var b strings.Builder
	var names []string
	for _, u := range e.Unhealthy {
		names = append(names, u.Component)
	}
	fmt.Fprintf(&b, "control plane not healthy after %s: %s", round(e.Waited), strings.Join(names, ", "))
	if len(e.Healthy) > 0 {
		fmt.Fprintf(&b, " (healthy: %s)", strings.Join(e.Healthy, ", "))
	}
	dir := e.ManifestsDir
	if dir == "" {
		dir = config.DefaultManifestsDir
	}
	for _, u := range e.Unhealthy {
		fmt.Fprintf(&b, "\n%s: checked %s", u.Component, u.Target)
		probeErrs := probeErrors(u.Err)
		if len(probeErrs) == 0 {
			// No check finished, or a caller's own Check failed.
			last := &ProbeError{Reason: ReasonTimeout, URL: u.Target, Detail: "no check finished in time"}
			if u.Err != nil {
				last = &ProbeError{Reason: ReasonOther, URL: u.Target, Detail: u.Err.Error()}
			}
			probeErrs = []*ProbeError{last}
		}
		for _, pe := range probeErrs {
			fmt.Fprintf(&b, "\n  last error: %s", pe)
		}
		for _, pe := range probeErrs {
			writeHint(&b, hint(u, dir, pe))
		}
		if l, ok := e.Logs[u.Component]; ok {
			fmt.Fprintf(&b, "\n  its container: %s; the last lines of its log:", l.State)
			for _, line := range strings.Split(l.Tail, "\n") {
				fmt.Fprintf(&b, "\n    | %s", line)
			}
		}
	}
	if len(e.ForeignFiles) > 0 {
		fmt.Fprintf(&b, "\nalso: the kubelet runs these extra files in %s: %s", dir, strings.Join(e.ForeignFiles, ", "))
	}
	return b.String()
}

// advice is a likely cause and the commands that confirm or fix it.
type advice struct {
	cause string
	run   []string
}

func writeHint(b *strings.Builder, a advice) {
	fmt.Fprintf(b, "\n  likely cause: %s", a.cause)
	for _, cmd := range a.run {
		fmt.Fprintf(b, "\n  run: %s", cmd)
	}
}

// notHealthy builds Wait's timeout error from the components' last state.
func notHealthy(components []component, waited time.Duration, opts WaitOptions) *NotHealthyError {
	e := &NotHealthyError{Waited: waited, Healthy: healthyNames(components), ManifestsDir: opts.ManifestsDir, ForeignFiles: opts.ForeignFiles}
	for _, c := range components {
		if c.last.State != StateHealthy {
			e.Unhealthy = append(e.Unhealthy, Unhealthy{Component: c.probe.Component, Target: c.probe.Target, External: c.probe.External, Err: c.err})
		}
	}
	return e
}

// probeErrors returns every ProbeError in err: a joined error holds one per
// failing etcd member.
func probeErrors(err error) []*ProbeError {
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		var all []*ProbeError
		for _, inner := range joined.Unwrap() {
			all = append(all, probeErrors(inner)...)
		}
		return all
	}
	var pe *ProbeError
	if errors.As(err, &pe) {
		return []*ProbeError{pe}
	}
	return nil
}

// hint explains one failure of component u.
func hint(u Unhealthy, manifestsDir string, e *ProbeError) advice {
	name := u.Component
	host := e.URL
	if parsed, err := url.Parse(e.URL); err == nil && parsed.Host != "" {
		host = parsed.Host
	}
	logs := []string{"crictl ps -a --name " + name, "crictl logs $(crictl ps -a -q --name " + name + " | head -n 1)"}
	if u.External {
		logs = nil
	}
	switch e.Reason {
	case ReasonRefused:
		if u.External {
			return advice{cause: fmt.Sprintf("nothing listens on %s: the external %s member is down or listens elsewhere", host, name), run: []string{etcdctl(e) + " endpoint health"}}
		}
		return advice{
			cause: fmt.Sprintf("nothing listens on %s: the kubelet has not started %s (did it accept the manifest? is it running?), or %s exits right after starting", host, name, name),
			run:   append([]string{"kubeboot validate " + manifestsDir, "systemctl status kubelet"}, logs...),
		}
	case ReasonUnreachable:
		return advice{cause: fmt.Sprintf("%s cannot be reached from this node: is the address right, and is it configured on an interface?", host),
			run: []string{"ip -brief address"}}
	case ReasonTimeout:
		if name == config.NameEtcd {
			// etcd accepts connections before it serves them.
			return advice{cause: "etcd accepts connections but does not answer in time: a member serves clients only once its cluster has a leader, so check its peers; or its disk is too slow",
				run: append([]string{etcdctl(e) + " endpoint status -w table"}, logs...)}
		}
		return advice{cause: name + " accepts connections but does not answer in time: it is overloaded or stuck, or a firewall drops the traffic", run: logs}
	case ReasonTLS:
		return tlsHint(e, host)
	case ReasonCredentials:
		if e.Status == 403 {
			return advice{cause: fmt.Sprintf("the client certificate %s authenticates, but its user may not read the health endpoints: check the --authorization-* flags and the RBAC of its user", e.CertFile), run: logs}
		}
		return advice{cause: fmt.Sprintf("the server did not authenticate the client certificate %s: it is not signed by the CA the server trusts (--client-ca-file, expected %s), or it expired", e.CertFile, e.CAFile),
			run: []string{"openssl verify -CAfile " + e.CAFile + " " + e.CertFile, "openssl x509 -noout -subject -issuer -enddate -in " + e.CertFile}}
	case ReasonUnhealthy:
		if len(e.FailedChecks) == 0 {
			return advice{cause: name + " runs but reports that it is not healthy", run: append(checkCommand(u, e), logs...)}
		}
		cause := fmt.Sprintf("%s runs but these checks fail: %s", name, strings.Join(e.FailedChecks, ", "))
		if slices.Contains(e.FailedChecks, "etcd") {
			cause += "; the API server cannot use etcd: make etcd healthy first"
		}
		return advice{cause: cause, run: append(checkCommand(u, e), logs...)}
	case ReasonNoLeader:
		return advice{cause: "the etcd member has no leader: the other members are down or unreachable on the peer port, or the cluster lost quorum",
			run: append([]string{etcdctl(e) + " endpoint status --cluster -w table"}, logs...)}
	case ReasonAlarm:
		cause := fmt.Sprintf("etcd raised alarms (%s): ", strings.Join(e.Alarms, "; "))
		if strings.Contains(strings.Join(e.Alarms, " "), "CORRUPT") {
			cause += "a member's data is corrupt: restore it from a snapshot"
		} else {
			cause += "the database exceeded its space quota: compact and defragment it, then disarm the alarm"
		}
		return advice{cause: cause, run: []string{etcdctl(e) + " alarm list"}}
	}
	return advice{cause: name + " failed the check; its logs say why", run: logs}
}

// tlsHint tells a server certificate that the CA does not verify from a
// client certificate that the server refuses.
func tlsHint(e *ProbeError, host string) advice {
	var verify *tls.CertificateVerificationError
	if !errors.As(e.Err, &verify) {
		return advice{
			cause: fmt.Sprintf("the server refused the client certificate %s: it is not signed by a CA the server trusts, or it expired", orNone(e.CertFile)),
			run:   []string{"openssl verify -CAfile " + e.CAFile + " " + e.CertFile},
		}
	}
	var hostname x509.HostnameError
	if errors.As(e.Err, &hostname) {
		return advice{
			cause: fmt.Sprintf("the server certificate %s does not cover %s: it lacks that SAN", orNone(e.ServerCertFile), hostname.Host),
			run:   []string{"kubeboot init --renew (or kubeboot certs renew <name>) re-issues it with every SAN"},
		}
	}
	a := advice{cause: fmt.Sprintf("the server certificate and the CA %s do not match: was one of them regenerated without the other?", orNone(e.CAFile))}
	if e.ServerCertFile != "" {
		a.run = append(a.run, "openssl verify -CAfile "+e.CAFile+" "+e.ServerCertFile)
	}
	// What the server really presents, which may not be the file on disk.
	a.run = append(a.run, "openssl s_client -connect "+host+" </dev/null 2>/dev/null | openssl x509 -noout -issuer -ext subjectAltName")
	return a
}

// checkCommand repeats the failed check by hand.
func checkCommand(u Unhealthy, e *ProbeError) []string {
	if u.Component == config.NameEtcd {
		return []string{etcdctl(e) + " endpoint health"}
	}
	cmd := "curl --cacert " + e.CAFile
	if e.CertFile != "" {
		cmd += " --cert " + e.CertFile + " --key " + e.KeyFile
	}
	return []string{cmd + " '" + e.URL + "?verbose'"}
}

// etcdctl is the etcdctl command line that reaches the failing member with
// the check's credentials.
func etcdctl(e *ProbeError) string {
	cmd := "etcdctl --endpoints=" + e.URL
	if e.CAFile != "" {
		cmd += " --cacert=" + e.CAFile
	}
	if e.CertFile != "" {
		cmd += " --cert=" + e.CertFile + " --key=" + e.KeyFile
	}
	return cmd
}
