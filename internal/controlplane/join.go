package controlplane

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/etcd"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/templates"
)

// endpointTimeout bounds the preflight's TLS handshake with the
// controlPlaneEndpoint.
const endpointTimeout = 10 * time.Second

// JoinNode is the data of the `kubeboot join --control-plane`
// workflow: the control-plane node's, which init's phases run on, and the
// join's own settings.
type JoinNode struct {
	*phases.Node
	// Join is the join part of the JoinConfiguration; nil when the node is
	// configured by a ClusterConfiguration alone (a re-run), which no
	// etcd-join can run from.
	Join *config.Join
	// Secrets are the files of the certificate bundle the join imports, or
	// of the kubeadm-certs Secret download-certs fetched; nil when the node
	// holds them already.
	Secrets map[string][]byte
}

// JoinWorkflow is the `kubeboot join --control-plane` workflow, in
// dependency order. The etcd member joins as a learner and is promoted
// before the API server starts on this node. The kubelet starts before
// etcd-join, which waits for the etcd member it runs: earlier than in
// init, whose first wait comes after write-manifests. As in init,
// kubelet-finalize then points kubelet.conf at the certificate the kubelet
// rotates, and certs-renewal has systemd renew what comes due.
var JoinWorkflow = workflow.Runner[*JoinNode]{Phases: []workflow.Phase[*JoinNode]{
	DownloadCerts,
	JoinPreflight,
	initPhase(phases.Preflight),
	CertsImport,
	initPhase(phases.Certs),
	initPhase(phases.Kubeconfig),
	initPhase(phases.KubeletConfig),
	initPhase(phases.KubeletStart(phases.ControlPlaneKubelet)),
	initPhase(phases.APIServerConfig),
	EtcdJoin,
	initPhase(phases.ControlPlane),
	initPhase(phases.Validate),
	initPhase(phases.WriteManifests),
	initPhase(phases.Wait),
	initPhase(phases.MarkControlPlane),
	initPhase(phases.KubeletFinalize),
	initPhase(phases.CertsRenewal),
}}

// initPhase is one of init's phases in the join, run on the joining node.
func initPhase(p workflow.Phase[*phases.Node]) workflow.Phase[*JoinNode] {
	return workflow.Within(p, func(j *JoinNode) *phases.Node { return j.Node })
}

// JoinPreflight checks that the cluster is reachable through the
// controlPlaneEndpoint and that it is the bundle's cluster: its API server
// presents a certificate of the bundle's cluster CA.
var JoinPreflight = workflow.Phase[*JoinNode]{Name: "join-preflight", Short: "Check the control-plane endpoint and that its CA is the bundle's", Run: checkEndpoint}

func checkEndpoint(ctx context.Context, s *JoinNode) error {
	caPEM := s.Secrets[config.CertCA+".crt"]
	if caPEM == nil {
		var err error
		if caPEM, err = s.Files.ReadFile(s.Config.CertPath(config.CertCA)); errors.Is(err, fs.ErrNotExist) {
			return &exit.UsageError{Msg: "this node has no cluster CA yet: pass --certs-bundle and --key-file from `kubeboot certs export` on a control-plane node, or --certificate-key (join.certificateKey) after `kubeboot init --upload-certs`"}
		} else if err != nil {
			return fmt.Errorf("read cluster CA %q: %w", s.Config.CertPath(config.CertCA), err)
		}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		from := s.Config.CertPath(config.CertCA)
		if s.Secrets != nil {
			from = config.CertCA + ".crt of the bundle"
		}
		return fmt.Errorf("read cluster CA %q: no PEM certificate in it", from)
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
	return checkDiscoveredCA(ctx, s, caPEM)
}

// checkDiscoveredCA runs the join's discovery, when it has one, and
// requires the cluster it verified to have the bundle's (or this node's)
// CA: with a token and the CA's pins, or a discovery file, the new
// control-plane node trusts the bundle only for the cluster the token
// proves.
func checkDiscoveredCA(ctx context.Context, s *JoinNode, caPEM []byte) error {
	if s.Join == nil || s.Join.Discovery == nil {
		return nil
	}
	c, err := phases.Discover(ctx, s.Run, *s.Join.Discovery, config.DefaultDiscoveryTimeout)
	if err != nil {
		return err
	}
	ours, _ := pem.Decode(caPEM)
	theirs, _ := pem.Decode(c.CA)
	if ours == nil || theirs == nil || !bytes.Equal(ours.Bytes, theirs.Bytes) {
		return fmt.Errorf("the bundle's cluster CA is not the CA of the cluster that discovery verified (hash %s): the bundle belongs to another cluster; export it again with `kubeboot certs export` on a control-plane node of this one", c.CAHash)
	}
	s.Report.Infof("the cluster CA (the bundle's, or this node's) is the discovered cluster's")
	return nil
}

// CertsImport writes the bundle's cluster secrets, unless there is no
// bundle (a re-run relies on the files on the node).
var CertsImport = workflow.Phase[*JoinNode]{Name: "certs-import", Short: "Write the shared CAs, service-account keys and encryption config from the bundle", Run: func(_ context.Context, s *JoinNode) error {
	if s.Secrets == nil {
		s.Report.Infof("no bundle given: using the CAs on this node")
		return nil
	}
	return ImportSecrets(s.Node, s.Secrets)
}}

// EtcdJoin adds this node's etcd member to the cluster as a learner,
// starts it, waits until it is healthy and promotes it to a voter. A
// member that does not come up or catch up in time is removed again, so the
// cluster is left as it was. A node whose member the cluster no longer has
// (a restore on another node made a new cluster) joins as a new member,
// its old data moved aside (see leaveOldData).
var EtcdJoin = workflow.Phase[*JoinNode]{Name: "etcd-join", Short: "Add this node's etcd member as a learner, start it and promote it", LiveOnly: true, Run: runEtcdJoin}

func runEtcdJoin(ctx context.Context, s *JoinNode) error {
	c := s.Config
	if s.Join == nil {
		return &exit.UsageError{Msg: "etcd-join needs a JoinConfiguration: the node's configuration as a joining control-plane node"}
	}
	endpoints, err := etcdEndpoints(ctx, s)
	if err != nil {
		return err
	}
	cli, err := etcd.New(ctx, endpoints, etcd.LocalTLS(c, s.Files.HostPath))
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	self := etcd.ClientURL(c)
	cur, err := currentCluster(ctx, s, cli, endpoints, self)
	if err != nil {
		return err
	}
	if err := leaveOldData(ctx, s, cli, cur, self); err != nil {
		return err
	}
	id, all, err := etcd.AddLearner(ctx, cli, c.Node.Name, etcd.PeerURL(c))
	if err != nil {
		return err
	}
	learner := etcd.IsLearner(all, id)
	s.Report.Infof("etcd member %s (%x) is in the cluster of %d (learner: %t)", c.Node.Name, id, len(all), learner)
	// A re-run keeps the cluster its member joined (NewNode read it
	// from the manifest), so the manifest is not rewritten.
	if s.Membership.InitialCluster == "" {
		s.Membership = templates.EtcdMembership{InitialCluster: etcd.InitialCluster(all, id, c.Node.Name)}
	}
	if err := phases.EnsureEtcdDataDir(s.Node); err != nil {
		return err
	}
	if err := phases.Render(s.Node, config.NameEtcd, config.NameAPIServer, config.NameControllerManager, config.NameScheduler); err != nil {
		return err
	}
	if err := phases.WriteStaged(s.Node, config.NameEtcd); err != nil {
		return err
	}
	giveUp := func(cause error) error {
		if !learner {
			return cause
		}
		if err := etcd.RemoveMember(ctx, cli, id); err != nil {
			return fmt.Errorf("%w\nremoving the learner failed too: %w", cause, err)
		}
		return fmt.Errorf("%w\nremoved the learner %x again: the cluster is as before. Fix the cause, delete %s and %s, and join again",
			cause, id, c.ManifestPath(config.NameEtcd), c.Etcd.Local.DataDir)
	}
	if err := waitLocalEtcd(ctx, s); err != nil {
		return giveUp(err)
	}
	s.Report.Infof("etcd member %s answers and follows the leader", c.Node.Name)
	if learner {
		if err := etcd.PromoteLearner(ctx, cli, id, c.Timeouts.ControlPlane.Duration, s.Report); err != nil {
			return giveUp(err)
		}
		s.Report.Infof("promoted etcd member %s to a voting member", c.Node.Name)
	}
	return removeLeftData(s.Node)
}

// waitLocalEtcd waits until this node's etcd member answers and knows
// the leader. The health probes' linearizable read is no test here: a
// learner refuses it ("rpc not supported for learner") until promoted.
func waitLocalEtcd(ctx context.Context, s *JoinNode) error {
	endpoint := etcd.ClientURL(s.Config)
	cli, err := etcd.New(ctx, []string{endpoint}, etcd.LocalTLS(s.Config, s.Files.HostPath))
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	return etcd.WaitMember(ctx, cli, endpoint, s.Config.Timeouts.ControlPlane.Duration, s.Report)
}
