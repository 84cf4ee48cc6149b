// Package discovery owns how a joining worker node finds the cluster and
// comes to trust it, as kubeadm's discovery does. By token, it reads
// kube-public/cluster-info anonymously without verifying TLS, checks the
// bootstrapsigner's signature of it with the token, pins the CA it names
// by hash, and reads it again over TLS verified with that CA. By file, it
// takes the CA and server of a discovery kubeconfig and reads cluster-info
// over TLS verified with that CA. Apart from those HTTPS requests and the
// read of the discovery file it is pure: it writes nothing, prints
// nothing, and the token's secret is in none of its errors. Published
// reads the same facts with an administrator's client, for the commands
// that print a join command from any machine.
package discovery

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/pki"
	"github.com/kubeboot/kubeboot/templates"
)

// Cluster is what discovery found: where the cluster is, the CA to trust
// it by, and the credential of the kubelet's TLS bootstrap.
type Cluster struct {
	// Name names the cluster in the bootstrap kubeconfig.
	Name string
	// Server is the API server's URL: cluster-info's (the
	// controlPlaneEndpoint), or the discovery file's.
	Server string
	// CA is the cluster CA certificate, PEM.
	CA []byte
	// CAHash is the CA's pin (see pki.CACertHash).
	CAHash string
	// Token is the TLS bootstrap credential; zero when there is none.
	Token bootstraptoken.Token
}

// Options are how discovery waits.
type Options struct {
	// Timeout bounds the discovery, retries included.
	Timeout time.Duration
	// Interval is the pause between attempts while the API server does not
	// answer; zero means 2s.
	Interval time.Duration
	// Answered is the pause after the API server answered but did not
	// serve cluster-info as discovery needs it yet (its control plane is
	// up, and init is about to publish it); zero means 500ms.
	Answered time.Duration
	// Progress, when set, is told what discovery waits for, each time the
	// reason changes.
	Progress func(msg string)
}

// requestTimeout bounds one request, so that a server that accepts the
// connection and never answers costs one attempt, not the whole timeout.
const requestTimeout = 10 * time.Second

// maxBody caps what is read of an answer: a ConfigMap holds at most 1 MiB.
const maxBody = 2 << 20

// fatalError is a failure that no retry fixes, such as a wrong CA pin.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

func fatal(err error) error { return &fatalError{err} }

// answeredError is a failure after the API server answered: cluster-info
// is not there, not readable anonymously, or not signed for the token
// yet. The cluster's control plane is up, so discovery asks again sooner.
type answeredError struct{ err error }

func (e *answeredError) Error() string { return e.err.Error() }
func (e *answeredError) Unwrap() error { return e.err }

func answered(err error) error { return &answeredError{err} }

// errNoSignature is the failure while the bootstrapsigner has not signed
// cluster-info with the token: soon after the token was created, or never,
// for a token that is unknown, expired or deleted.
type errNoSignature struct{ id string }

func (e *errNoSignature) Error() string {
	return fmt.Sprintf("cluster-info holds no signature %s%s", SignatureKeyPrefix, e.id)
}

// ByToken discovers the cluster through the API server at endpoint
// (host:port) with a bootstrap token, trusting only a CA whose pin is one
// of pins ("sha256:<hex>", lower case). It retries while the API server
// cannot be reached or cluster-info is not signed for the token yet, for
// up to opts.Timeout; a signature that does not verify, a CA that matches
// no pin or a verified read that differs end it at once.
func ByToken(ctx context.Context, endpoint string, token bootstraptoken.Token, pins []string, opts Options) (*Cluster, error) {
	// Nothing is trusted from this connection until the token's signature
	// and a pin have vouched for it.
	insecure := newHTTPClient(&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // see above
	c, err := retry(ctx, opts, func(ctx context.Context) (*Cluster, error) {
		return byTokenOnce(ctx, insecure, endpoint, token, pins)
	})
	if err != nil {
		var missing *errNoSignature
		if errors.As(err, &missing) {
			err = fmt.Errorf("%w: the token %s is unknown, expired or deleted: create one with `kubeboot token create` on a control-plane node "+
				"(or the controller manager runs without its bootstrapsigner, which signs cluster-info for each token)", err, token.ID)
		}
		return nil, fmt.Errorf("discover the cluster through %q: %w", endpoint, err)
	}
	return c, nil
}

func byTokenOnce(ctx context.Context, insecure *http.Client, endpoint string, token bootstraptoken.Token, pins []string) (*Cluster, error) {
	cm, err := getClusterInfo(ctx, insecure, endpoint)
	if err != nil {
		return nil, err
	}
	kubeconfig, ok := cm.Data[templates.ClusterInfoKey]
	if !ok {
		return nil, answered(fmt.Errorf("cluster-info has no %q key: run `kubeboot init phase cluster-info` on a control-plane node", templates.ClusterInfoKey))
	}
	signature, ok := cm.Data[SignatureKeyPrefix+token.ID]
	if !ok {
		return nil, answered(&errNoSignature{id: token.ID})
	}
	if err := VerifyJWS(signature, []byte(kubeconfig), token); err != nil {
		return nil, fatal(fmt.Errorf("verify the signature %s%s of cluster-info: %w: the token's secret is wrong (check --token), "+
			"or something between this node and %s changed the answer", SignatureKeyPrefix, token.ID, err, endpoint))
	}
	c, err := parseClusterInfo([]byte(kubeconfig))
	if err != nil {
		return nil, fatal(err)
	}
	if !slices.Contains(pins, c.CAHash) {
		return nil, fatal(fmt.Errorf("the cluster's CA has hash %s, not the pinned %s: check --discovery-token-ca-cert-hash "+
			"(`kubeboot token create --print-join-command` on a control-plane node prints the right one)", c.CAHash, strings.Join(pins, " or ")))
	}
	// The CA is trusted now: the same answer must come over TLS verified
	// with it, or the first one came from someone else.
	secure, err := verifyingClient(c.CA)
	if err != nil {
		return nil, fatal(err)
	}
	again, err := getClusterInfo(ctx, secure, endpoint)
	if err != nil {
		return nil, err
	}
	if again.Data[templates.ClusterInfoKey] != kubeconfig {
		return nil, fatal(fmt.Errorf("read cluster-info again over TLS verified with the cluster CA: its kubeconfig differs from the first read; try again, and if it persists, something between this node and %s changes the answers", endpoint))
	}
	c.Token = token
	return c, nil
}

// parseClusterInfo reads cluster-info's kubeconfig: one cluster, with its
// CA embedded and an https server.
func parseClusterInfo(kubeconfig []byte) (*Cluster, error) {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("parse the kubeconfig of cluster-info: %w", err)
	}
	if len(cfg.Clusters) != 1 {
		return nil, fmt.Errorf("parse the kubeconfig of cluster-info: %d clusters, want 1", len(cfg.Clusters))
	}
	var cluster *clientcmdapi.Cluster
	for _, c := range cfg.Clusters {
		cluster = c
	}
	return newCluster("cluster-info", config.DefaultClusterName, cluster.Server, cluster.CertificateAuthorityData)
}

// newCluster checks a discovered server and CA; from names where they come from.
func newCluster(from, name, server string, ca []byte) (*Cluster, error) {
	if u, err := url.Parse(server); err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("read the server of %s %q: want an https:// URL", from, server)
	}
	if len(ca) == 0 {
		return nil, fmt.Errorf("read the CA of %s: it embeds none (certificate-authority-data)", from)
	}
	hash, err := pki.CACertHash(ca)
	if err != nil {
		return nil, fmt.Errorf("read the CA of %s (certificate-authority-data): %w", from, err)
	}
	return &Cluster{Name: name, Server: server, CA: ca, CAHash: hash}, nil
}

// retry runs attempt until it succeeds, fails fatally, or opts.Timeout
// has passed; then the last failure is the error. It pauses
// opts.Interval after an attempt that did not reach the API server, and
// opts.Answered after one it answered.
func retry(ctx context.Context, opts Options, attempt func(context.Context) (*Cluster, error)) (*Cluster, error) {
	interval, answeredPause := cmp.Or(opts.Interval, 2*time.Second), cmp.Or(opts.Answered, 500*time.Millisecond)
	timeout, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	var last error
	for {
		c, err := attempt(timeout)
		stop, isFatal := errors.AsType[*fatalError](err)
		switch {
		case err == nil:
			return c, nil
		case isFatal:
			return nil, stop.err
		case timeout.Err() == nil: // else the timeout ended the attempt: keep its predecessor's reason
			if opts.Progress != nil && (last == nil || last.Error() != err.Error()) {
				opts.Progress("waiting: " + err.Error())
			}
			last = err
		}
		pause := interval
		if _, ok := errors.AsType[*answeredError](err); ok {
			pause = answeredPause
		}
		select {
		case <-time.After(pause):
		case <-timeout.Done():
			switch {
			case ctx.Err() != nil:
				return nil, ctx.Err()
			case last != nil:
				return nil, fmt.Errorf("%w (gave up after %s, timeouts.discovery)", last, opts.Timeout)
			}
			return nil, fmt.Errorf("no answer within %s (timeouts.discovery)", opts.Timeout)
		}
	}
}

// newHTTPClient is a client of one attempt's requests, anonymous.
func newHTTPClient(tlsConfig *tls.Config) *http.Client {
	return &http.Client{
		Timeout: requestTimeout,
		Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			TLSClientConfig:     tlsConfig,
			TLSHandshakeTimeout: requestTimeout,
			DisableKeepAlives:   true,
		},
	}
}

// verifyingClient trusts only the cluster CA, and checks the server's
// name against the endpoint's host.
func verifyingClient(ca []byte) (*http.Client, error) {
	tlsConfig, err := pki.ClientTLS(ca, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("read the cluster CA: %w", err)
	}
	return newHTTPClient(tlsConfig), nil
}

// getClusterInfo reads kube-public/cluster-info through the API server at
// endpoint. A certificate the client does not trust is fatal; the other
// failures may pass, as the API server or init's cluster-info phase
// comes up.
func getClusterInfo(ctx context.Context, client *http.Client, endpoint string) (*corev1.ConfigMap, error) {
	target := "https://" + endpoint + templates.ClusterInfoPath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, fatal(fmt.Errorf("read cluster-info at %q: %w", target, err))
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		// The url.Error would name the target a second time.
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			err = urlErr.Err
		}
		if certificateError(err) {
			return nil, fatal(fmt.Errorf("read cluster-info at %q over TLS verified with the cluster CA: %w: the API server there does not serve a certificate of that CA for this name", target, err))
		}
		return nil, fmt.Errorf("reach the API server at %q: %w: check the endpoint, and that the API server is up and reachable from this node", endpoint, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("read cluster-info at %q: %w", target, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusUnauthorized, http.StatusForbidden:
		return nil, answered(fmt.Errorf("the API server refuses anonymous GET of cluster-info (HTTP %d): `kubeboot init phase cluster-info` on a control-plane node grants it", resp.StatusCode))
	case http.StatusNotFound:
		return nil, answered(errors.New("the API server has no kube-public/cluster-info (HTTP 404): run `kubeboot init phase cluster-info` on a control-plane node"))
	default:
		return nil, answered(fmt.Errorf("read cluster-info at %q: HTTP %d", target, resp.StatusCode))
	}
	var cm corev1.ConfigMap
	if err := json.Unmarshal(body, &cm); err != nil || cm.Kind != "ConfigMap" {
		return nil, fatal(fmt.Errorf("read cluster-info at %q: the answer is not a ConfigMap", target))
	}
	return &cm, nil
}

// certificateError reports whether err is TLS refusing the server's
// certificate, which no retry changes.
func certificateError(err error) bool {
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname) || errors.As(err, &invalid)
}
