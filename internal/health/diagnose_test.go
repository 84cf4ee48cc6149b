package health

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kubeboot/kubeboot/internal/config"
)

func TestDiagnosticPerReason(t *testing.T) {
	const (
		ca     = "/etc/kubernetes/pki/ca.crt"
		client = "/etc/kubernetes/pki/apiserver-kubelet-client.crt"
		etcdCA = "/etc/kubernetes/pki/etcd/ca.crt"
	)
	api := "https://10.0.0.1:6443/readyz"
	member := "https://127.0.0.1:2379"
	tests := []struct {
		name      string
		unhealthy Unhealthy
		want      []string
	}{
		{"refused", Unhealthy{Component: config.NameAPIServer,
			Err: &ProbeError{Reason: ReasonRefused, URL: api, Detail: "connection refused"}},
			[]string{"nothing listens on 10.0.0.1:6443", "kubeboot validate /etc/kubernetes/manifests", "crictl ps -a --name kube-apiserver"}},
		{"refused external etcd", Unhealthy{Component: config.NameEtcd, External: true,
			Err: &ProbeError{Reason: ReasonRefused, URL: "https://10.0.0.2:2379", Detail: "connection refused", CAFile: "/e/ca.crt"}},
			[]string{"the external etcd member is down", "run: etcdctl --endpoints=https://10.0.0.2:2379 --cacert=/e/ca.crt endpoint health"}},
		{"unreachable", Unhealthy{Component: config.NameAPIServer,
			Err: &ProbeError{Reason: ReasonUnreachable, URL: api, Detail: "unreachable"}},
			[]string{"10.0.0.1:6443 cannot be reached from this node", "ip -brief address"}},
		{"timeout", Unhealthy{Component: config.NameScheduler,
			Err: &ProbeError{Reason: ReasonTimeout, URL: "https://127.0.0.1:10259/livez", Detail: "no answer in time"}},
			[]string{"does not answer in time", "crictl logs"}},
		{"client certificate refused", Unhealthy{Component: config.NameEtcd,
			Err: &ProbeError{Reason: ReasonTLS, URL: member, CAFile: etcdCA, CertFile: "/etc/kubernetes/pki/etcd/healthcheck-client.crt",
				Err: &net.OpError{Op: "remote error", Err: errors.New("tls: bad certificate")}}},
			[]string{"the server refused the client certificate /etc/kubernetes/pki/etcd/healthcheck-client.crt", "openssl verify -CAfile " + etcdCA}},
		{"server certificate", Unhealthy{Component: config.NameAPIServer,
			Err: &ProbeError{Reason: ReasonTLS, URL: api, CAFile: ca, ServerCertFile: "/etc/kubernetes/pki/apiserver.crt",
				Err: &tls.CertificateVerificationError{Err: errors.New("x509")}}},
			[]string{"the server certificate and the CA " + ca + " do not match", "openssl verify -CAfile " + ca + " /etc/kubernetes/pki/apiserver.crt",
				"openssl s_client -connect 10.0.0.1:6443"}},
		{"server certificate lacks a SAN", Unhealthy{Component: config.NameScheduler,
			Err: &ProbeError{Reason: ReasonTLS, URL: "https://[::1]:10259/livez", CAFile: ca, ServerCertFile: "/etc/kubernetes/pki/scheduler.crt",
				Err: &tls.CertificateVerificationError{Err: x509.HostnameError{Certificate: &x509.Certificate{}, Host: "::1"}}}},
			[]string{"the server certificate /etc/kubernetes/pki/scheduler.crt does not cover ::1", "kubeboot certs renew"}},
		{"401", Unhealthy{Component: config.NameAPIServer,
			Err: &ProbeError{Reason: ReasonCredentials, Status: 401, URL: api, CAFile: ca, CertFile: client}},
			[]string{"did not authenticate the client certificate " + client, "--client-ca-file, expected " + ca, "openssl verify -CAfile " + ca + " " + client}},
		{"403", Unhealthy{Component: config.NameAPIServer,
			Err: &ProbeError{Reason: ReasonCredentials, Status: 403, URL: api, CAFile: ca, CertFile: client}},
			[]string{"authenticates, but its user may not read the health endpoints"}},
		{"readyz checks", Unhealthy{Component: config.NameAPIServer,
			Err: &ProbeError{Reason: ReasonUnhealthy, Status: 500, URL: api, FailedChecks: []string{"etcd", "poststarthook/rbac"}, CAFile: ca, CertFile: client, KeyFile: "/k.key"}},
			[]string{"these checks fail: etcd, poststarthook/rbac", "make etcd healthy first", "run: curl --cacert " + ca + " --cert " + client + " --key /k.key '" + api + "?verbose'"}},
		{"no leader", Unhealthy{Component: config.NameEtcd,
			Err: &ProbeError{Reason: ReasonNoLeader, URL: member, CAFile: etcdCA}},
			[]string{"has no leader", "etcdctl --endpoints=" + member + " --cacert=" + etcdCA + " endpoint status --cluster -w table"}},
		{"nospace", Unhealthy{Component: config.NameEtcd,
			Err: &ProbeError{Reason: ReasonAlarm, URL: member, Alarms: []string{"NOSPACE on member 1"}}},
			[]string{"etcd raised alarms (NOSPACE on member 1)", "space quota", "alarm list"}},
		{"corrupt", Unhealthy{Component: config.NameEtcd,
			Err: &ProbeError{Reason: ReasonAlarm, URL: member, Alarms: []string{"CORRUPT on member 1"}}},
			[]string{"restore it from a snapshot"}},
		{"no check finished", Unhealthy{Component: config.NameAPIServer, Target: api},
			[]string{"last error: " + api + ": no check finished in time", "does not answer in time"}},
		{"a caller's own check", Unhealthy{Component: "custom", Target: "x", Err: errors.New("boom")},
			[]string{"last error: x: boom", "its logs say why"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := (&NotHealthyError{Waited: time.Minute, Unhealthy: []Unhealthy{tt.unhealthy}}).Error()
			for _, want := range tt.want {
				if !strings.Contains(msg, want) {
					t.Errorf("diagnostic lacks %q:\n%s", want, msg)
				}
			}
		})
	}
}

// TestDiagnosticEveryMember: each failing etcd member gets its own finding.
func TestDiagnosticEveryMember(t *testing.T) {
	err := errors.Join(
		&ProbeError{Reason: ReasonRefused, URL: "https://10.0.0.2:2379", Detail: "connection refused"},
		&ProbeError{Reason: ReasonNoLeader, URL: "https://10.0.0.3:2379", Detail: "the member has no leader"},
	)
	var urls []string
	for _, pe := range probeErrors(fmt.Errorf("wrapped: %w", err)) {
		urls = append(urls, pe.URL)
	}
	if diff := cmp.Diff([]string{"https://10.0.0.2:2379", "https://10.0.0.3:2379"}, urls); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	msg := (&NotHealthyError{Unhealthy: []Unhealthy{{Component: config.NameEtcd, External: true, Err: err}}}).Error()
	for _, want := range []string{"last error: https://10.0.0.2:2379: connection refused", "last error: https://10.0.0.3:2379: the member has no leader",
		"the external etcd member is down", "has no leader"} {
		if !strings.Contains(msg, want) {
			t.Errorf("diagnostic lacks %q:\n%s", want, msg)
		}
	}
}

// TestDiagnosticShowsContainerLog: a component whose container the runtime
// described gets its state and log tail under its finding, and only it.
func TestDiagnosticShowsContainerLog(t *testing.T) {
	refused := &ProbeError{Reason: ReasonRefused, URL: "https://127.0.0.1:10259/livez", Detail: "connection refused"}
	e := &NotHealthyError{
		Unhealthy: []Unhealthy{
			{Component: config.NameScheduler, Err: refused},
			{Component: config.NameControllerManager, Err: refused},
		},
		Logs: map[string]ContainerLog{config.NameScheduler: {State: "exited with code 1 (Error)", Tail: "I1124 starting\nE1124 open /etc/kubernetes/scheduler.conf: no such file or directory"}},
	}
	msg := e.Error()
	want := "\n  its container: exited with code 1 (Error); the last lines of its log:\n    | I1124 starting\n    | E1124 open /etc/kubernetes/scheduler.conf: no such file or directory"
	if !strings.Contains(msg, want) {
		t.Errorf("diagnostic lacks the scheduler's log tail %q:\n%s", want, msg)
	}
	if strings.Count(msg, "its container:") != 1 {
		t.Errorf("a log tail appears for a component the runtime did not describe:\n%s", msg)
	}
	if strings.Index(msg, "its container:") > strings.Index(msg, config.NameControllerManager+": checked") {
		t.Errorf("the scheduler's log tail is not under the scheduler's finding:\n%s", msg)
	}
}
