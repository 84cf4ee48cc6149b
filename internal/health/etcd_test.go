package health

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/kubeboot/kubeboot/internal/config"
)

// freeAddr returns a local address nobody listens on right now.
func freeAddr(t *testing.T) string {
	return strings.TrimPrefix(closedURL(t), "https://")
}

// member is the configuration of one embedded etcd member with the test
// PKI: client URLs over TLS with client certificates, peers over HTTP.
func member(t *testing.T, p *testPKI, name string) *embed.Config {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = filepath.Join(t.TempDir(), name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	client := url.URL{Scheme: "https", Host: freeAddr(t)}
	peer := url.URL{Scheme: "http", Host: freeAddr(t)}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(name)
	cfg.ClientTLSInfo = transport.TLSInfo{CertFile: p.server.certFile, KeyFile: p.server.keyFile, TrustedCAFile: p.ca.file, ClientCertAuth: true}
	return cfg
}

// running is an embedded etcd member; stop may be called more than once.
type running struct {
	*embed.Etcd
	stop func()
}

// start runs the members until the test ends and waits until all are ready.
func start(t *testing.T, members ...*embed.Config) []running {
	t.Helper()
	var started []running
	for _, cfg := range members {
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			t.Fatalf("start etcd: %v", err)
		}
		r := running{Etcd: e, stop: sync.OnceFunc(e.Close)}
		t.Cleanup(r.stop)
		started = append(started, r)
	}
	for _, e := range started {
		select {
		case <-e.Server.ReadyNotify():
		case <-time.After(30 * time.Second):
			t.Fatal("etcd did not become ready")
		}
	}
	return started
}

func etcdProbe(t *testing.T, ca string, client pair, endpoints ...string) Probe {
	t.Helper()
	probe, err := NewProbe(Target{Component: config.NameEtcd, Endpoints: endpoints, CAFile: ca, CertFile: client.certFile, KeyFile: client.keyFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return probe
}

// check runs probe once and returns the reasons of its ProbeErrors.
func check(t *testing.T, probe Probe) ([]Reason, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), attemptTimeout)
	defer cancel()
	err := probe.Check(ctx)
	var reasons []Reason
	for _, pe := range probeErrors(err) {
		reasons = append(reasons, pe.Reason)
	}
	if err != nil {
		t.Log(err) // shown with -v, to review the wording
	}
	return reasons, err
}

func TestEtcdCheck(t *testing.T) {
	p := newPKI(t)
	e := start(t, member(t, p, "m1"))[0]
	endpoint := e.Config().AdvertiseClientUrls[0].String()
	otherClient := p.other.issue(t, p.dir, "other-client")

	tests := []struct {
		name     string
		probe    Probe
		want     []Reason
		contains string
	}{
		{"healthy", etcdProbe(t, p.ca.file, p.client, endpoint), nil, ""},
		{"refused", etcdProbe(t, p.ca.file, p.client, closedURL(t)), []Reason{ReasonRefused}, "connection refused"},
		{"server cert from another CA", etcdProbe(t, p.other.file, p.client, endpoint), []Reason{ReasonTLS}, "is not signed by the CA in " + p.other.file},
		{"client cert refused", etcdProbe(t, p.ca.file, otherClient, endpoint), []Reason{ReasonTLS}, "does not accept the client certificate " + otherClient.certFile},
		{"one member of two down", etcdProbe(t, p.ca.file, p.client, endpoint, closedURL(t)), []Reason{ReasonRefused}, "connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			got, err := check(t, tt.probe)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("reasons (-want +got):\n%s\n%v", diff, err)
			}
			if err != nil && !strings.Contains(err.Error(), tt.contains) {
				t.Errorf("error lacks %q: %v", tt.contains, err)
			}
			// A member that is down or misconfigured must fail fast.
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("check took %v", took)
			}
		})
	}

	t.Run("NOSPACE alarm", func(t *testing.T) {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: clientTLS(t, p), Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cli.Close() }()
		alarm := &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: uint64(e.Server.MemberID()), Alarm: pb.AlarmType_NOSPACE}
		if _, err := pb.NewMaintenanceClient(cli.ActiveConnection()).Alarm(t.Context(), alarm); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_, _ = cli.AlarmDisarm(context.Background(), &clientv3.AlarmMember{MemberID: alarm.MemberID, Alarm: alarm.Alarm})
		}()
		got, err := check(t, etcdProbe(t, p.ca.file, p.client, endpoint))
		if diff := cmp.Diff([]Reason{ReasonAlarm}, got); diff != "" {
			t.Errorf("reasons (-want +got):\n%s", diff)
		}
		if err == nil || !strings.Contains(err.Error(), "NOSPACE on member") {
			t.Errorf("error does not name the alarm: %v", err)
		}
	})
}

func clientTLS(t *testing.T, p *testPKI) *tls.Config {
	t.Helper()
	cfg, err := loadTLS(tlsFiles{ca: p.ca.file, cert: p.client.certFile, key: p.client.keyFile})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestEtcdNoLeader stops one member of two, so the other loses its leader.
func TestEtcdNoLeader(t *testing.T) {
	p := newPKI(t)
	a, b := member(t, p, "a"), member(t, p, "b")
	cluster := a.InitialClusterFromName("a") + "," + b.InitialClusterFromName("b")
	a.InitialCluster, b.InitialCluster = cluster, cluster
	members := start(t, a, b)
	endpoint := a.AdvertiseClientUrls[0].String()
	probe := etcdProbe(t, p.ca.file, p.client, endpoint)
	if reasons, err := check(t, probe); err != nil {
		t.Fatalf("two members: %v %v", reasons, err)
	}

	members[1].stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		reasons, err := check(t, probe)
		if cmp.Equal([]Reason{ReasonNoLeader}, reasons) {
			if !strings.Contains(err.Error(), "the member has no leader") {
				t.Errorf("error: %v", err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader was never reported; last: %v %v", reasons, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestEtcdNotServing: a listener that never completes a handshake, like a
// member that waits for its cluster, is a timeout.
func TestEtcdNotServing(t *testing.T) {
	p := newPKI(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	probe := etcdProbe(t, p.ca.file, p.client, "https://"+l.Addr().String())
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	var pe *ProbeError
	if err := probe.Check(ctx); !errors.As(err, &pe) || pe.Reason != ReasonTimeout {
		t.Errorf("want a timeout, got %v", err)
	}
}
