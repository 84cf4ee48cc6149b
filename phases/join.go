package phases

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"slices"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/health"
	"github.com/kubeboot/kubeboot/staticpod"
)

// endpointTimeout bounds the preflight's TLS handshake with the
// controlPlaneEndpoint.
const endpointTimeout = 10 * time.Second

// JoinControlPlane is the `kubeboot join --control-plane` workflow, in
// dependency order. secrets are the files of a certificate bundle, or nil
// when the node holds them already (a re-run). The etcd member joins as a
// learner and is promoted before the API server starts on this node.
func JoinControlPlane(join config.Join, secrets map[string][]byte) Runner {
	return Runner{Phases: append(JoinPrepare(secrets),
		APIServerConfig,
		EtcdJoin(join),
		ControlPlane,
		Validate,
		WriteManifests,
		Wait,
	)}
}

// JoinPrepare are the join's phases up to the kubelet's configuration,
// which `kubeboot lab up --join` runs before it starts the kubelet.
func JoinPrepare(secrets map[string][]byte) []Phase {
	return []Phase{JoinPreflight(secrets), Preflight, CertsImport(secrets), Certs, Kubeconfig, KubeletConfig}
}

// JoinPreflight checks that the cluster is reachable through the
// controlPlaneEndpoint and that it is the bundle's cluster: its API server
// presents a certificate of the bundle's cluster CA.
func JoinPreflight(secrets map[string][]byte) Phase {
	return Phase{Name: "join-preflight", Short: "Check the control-plane endpoint and that its CA is the bundle's", Run: func(ctx context.Context, s *State) error {
		caPEM := secrets[config.CertCA+".crt"]
		if caPEM == nil {
			var err error
			if caPEM, err = s.Files.ReadFile(s.Config.CertPath(config.CertCA)); errors.Is(err, fs.ErrNotExist) {
				return &UsageError{Msg: "this node has no cluster CA yet: pass --certs-bundle and --key-file from `kubeboot certs export` on a control-plane node"}
			} else if err != nil {
				return fmt.Errorf("read cluster CA %q: %w", s.Config.CertPath(config.CertCA), err)
			}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return fmt.Errorf("read cluster CA: no certificate in ca.crt")
		}
		host, port := s.Config.ControlPlaneHostPort()
		dialer := &tls.Dialer{NetDialer: &net.Dialer{Timeout: endpointTimeout}, Config: &tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12}}
		dctx, cancel := context.WithTimeout(ctx, endpointTimeout)
		defer cancel()
		conn, err := dialer.DialContext(dctx, "tcp", net.JoinHostPort(host, port))
		if err != nil {
			var unknown x509.UnknownAuthorityError
			if errors.As(err, &unknown) {
				return fmt.Errorf("check control-plane endpoint %q: its certificate is not from the bundle's cluster CA: the bundle or the endpoint belongs to another cluster: %w", s.Config.ControlPlaneEndpoint, err)
			}
			return fmt.Errorf("check control-plane endpoint %q: %w", s.Config.ControlPlaneEndpoint, err)
		}
		_ = conn.Close()
		s.Report.Infof("%s serves a certificate of the bundle's cluster CA", net.JoinHostPort(host, port))
		return nil
	}}
}

// CertsImport writes the bundle's cluster secrets, unless there is no
// bundle (a re-run relies on the files on the node).
func CertsImport(secrets map[string][]byte) Phase {
	return Phase{Name: "certs-import", Short: "Write the shared CAs, service-account keys and encryption config from the bundle", Run: func(_ context.Context, s *State) error {
		if secrets == nil {
			s.Report.Infof("no bundle given: using the CAs on this node")
			return nil
		}
		return ImportSecrets(s, secrets)
	}}
}

// EtcdJoin adds this node's etcd member to the cluster as a learner,
// starts it, waits until it is healthy and promotes it to a voter. A
// member that does not come up or catch up in time is removed again, so the
// cluster is left as it was.
func EtcdJoin(join config.Join) Phase {
	return Phase{Name: "etcd-join", Short: "Add this node's etcd member as a learner, start it and promote it", LiveOnly: true, Run: func(ctx context.Context, s *State) error {
		return runEtcdJoin(ctx, s, join)
	}}
}

func runEtcdJoin(ctx context.Context, s *State, join config.Join) error {
	c := s.Config
	cli, err := newEtcdClient(ctx, s, join.EtcdEndpoints)
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	id, all, err := addLearner(ctx, cli, c.Node.Name, EtcdPeerURL(c))
	if err != nil {
		return err
	}
	learner := isLearner(all, id)
	s.Report.Infof("etcd member %s (%x) is in the cluster of %d (learner: %t)", c.Node.Name, id, len(all), learner)
	cluster, err := initialClusterOnDisk(s)
	if err != nil {
		return err
	}
	if cluster == "" {
		cluster = initialCluster(all, id, c.Node.Name)
	}
	// Joining flags go after the user's, so they win: etcd must not found a new cluster.
	c.Etcd.Local.ExtraArgs = append(c.Etcd.Local.ExtraArgs,
		config.Arg{Name: "initial-cluster", Value: cluster},
		config.Arg{Name: "initial-cluster-state", Value: "existing"})
	if err := ensureEtcdDataDir(s); err != nil {
		return err
	}
	if err := render(s, config.NameEtcd, config.NameAPIServer, config.NameControllerManager, config.NameScheduler); err != nil {
		return err
	}
	if err := writeStaged(s, config.NameEtcd); err != nil {
		return err
	}
	giveUp := func(cause error) error {
		if !learner {
			return cause
		}
		if err := removeMember(ctx, cli, id); err != nil {
			return fmt.Errorf("%w\nremoving the learner failed too: %w", cause, err)
		}
		return fmt.Errorf("%w\nremoved the learner %x again: the cluster is as before. Fix the cause, delete %s and %s, and join again",
			cause, id, c.ManifestPath(config.NameEtcd), c.Etcd.Local.DataDir)
	}
	if err := waitLocalEtcd(ctx, s); err != nil {
		return giveUp(err)
	}
	if learner {
		if err := promoteLearner(ctx, cli, id, c.Timeouts.ControlPlane.Duration, s.Report); err != nil {
			return giveUp(err)
		}
		s.Report.Infof("promoted etcd member %s to a voting member", c.Node.Name)
	}
	return nil
}

func isLearner(members []*pb.Member, id uint64) bool {
	for _, m := range members {
		if m.ID == id {
			return m.IsLearner
		}
	}
	return false
}

// initialClusterOnDisk returns the --initial-cluster of the etcd manifest
// on the node, if any: a re-run keeps it, so the manifest is not rewritten
// (which would restart etcd) just because members joined since.
func initialClusterOnDisk(s *State) (string, error) {
	data, err := s.Files.ReadFile(s.Config.ManifestPath(config.NameEtcd))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read etcd manifest %q: %w", s.Config.ManifestPath(config.NameEtcd), err)
	}
	pod := &corev1.Pod{}
	if err := yaml.Unmarshal(data, pod); err != nil {
		return "", fmt.Errorf("decode etcd manifest %q: %w", s.Config.ManifestPath(config.NameEtcd), err)
	}
	flags := health.CommandFlags(pod, config.NameEtcd)
	if flags["initial-cluster-state"] != "existing" {
		return "", nil
	}
	return flags["initial-cluster"], nil
}

// keepJoinedEtcdFlags makes a node whose etcd member joined an existing
// cluster render its etcd manifest as join did: with the --initial-cluster
// and --initial-cluster-state=existing of the manifest on disk. Without
// them the manifest would differ from the running one, and a re-rendered
// member would be told to found a new cluster. Commands that re-render a
// node (diff, upgrade apply) call it before rendering; it does nothing on
// the node that founded the cluster or with an external etcd, and keeps a
// flag the configuration sets (or removes) itself.
func keepJoinedEtcdFlags(s *State) error {
	local := s.Config.Etcd.Local
	if local == nil {
		return nil
	}
	cluster, err := initialClusterOnDisk(s)
	if err != nil || cluster == "" {
		return err
	}
	for _, arg := range []config.Arg{{Name: "initial-cluster", Value: cluster}, {Name: "initial-cluster-state", Value: "existing"}} {
		if !slices.ContainsFunc(local.ExtraArgs, func(a config.Arg) bool { return a.Name == arg.Name }) {
			local.ExtraArgs = append(local.ExtraArgs, arg)
		}
	}
	return nil
}

// writeStaged validates and writes the named staged manifests alone, so
// etcd can start and join before the rest of the control plane.
func writeStaged(s *State, names ...string) error {
	if err := s.Files.MkdirAll(s.Config.Paths.ManifestsDir, manifestDirMode); err != nil {
		return err
	}
	for _, name := range names {
		data, err := s.Files.ReadFile(stagedPath(s.Config, name))
		if err != nil {
			return fmt.Errorf("read staged manifest %q: %w", stagedPath(s.Config, name), err)
		}
		if err := staticpod.Err([]staticpod.Result{staticpod.Validate(name+".yaml", data, s.Config.Node.Name)}); err != nil {
			return err
		}
		if err := s.Files.WriteFile(s.Config.ManifestPath(name), data, manifestMode); err != nil {
			return err
		}
	}
	return nil
}

// TimeoutError is a join step that did not finish in time; like an
// unhealthy control plane, it exits with code 4.
type TimeoutError struct {
	// Msg says what did not happen and where to look.
	Msg string
}

// Error returns the message.
func (e *TimeoutError) Error() string { return e.Msg }

// ExitCode makes a timeout exit with code 4.
func (e *TimeoutError) ExitCode() int { return 4 }

// waitLocalEtcd waits until this node's etcd member answers and knows
// the leader. The health probes' linearizable read is no test here: a
// learner refuses it ("rpc not supported for learner") until promoted.
func waitLocalEtcd(ctx context.Context, s *State) error {
	endpoint := EtcdClientURL(s.Config)
	cli, err := newEtcdClient(ctx, s, []string{endpoint})
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	timeout := s.Config.Timeouts.ControlPlane.Duration
	deadline := time.Now().Add(timeout)
	s.Report.Infof("waiting for the local etcd member at %s", endpoint)
	for {
		sctx, cancel := context.WithTimeout(ctx, statusTimeout)
		resp, err := cli.Status(sctx, endpoint)
		cancel()
		if err == nil && resp.Leader != 0 {
			s.Report.Infof("local etcd member is up and follows leader %x (raft index %d)", resp.Leader, resp.RaftIndex)
			return nil
		}
		if err == nil {
			err = errors.New("no leader known yet")
		}
		if time.Now().After(deadline) {
			return &TimeoutError{Msg: fmt.Sprintf("wait for local etcd member %s: not up after %s: %v (see `crictl logs` of etcd)", endpoint, timeout, err)}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for local etcd member %s: %w", endpoint, ctx.Err())
		case <-time.After(promoteInterval):
		}
	}
}
