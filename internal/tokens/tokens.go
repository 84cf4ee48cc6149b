// Package tokens holds the operations of `kubeboot token` on a running
// cluster, as its administrator (admin.conf): create a bootstrap token
// for joining nodes, with its join command and, if asked, the discovery
// file of `join --discovery-file`; list the tokens without their
// secrets; delete tokens by ID or by the whole token. They change objects
// in the cluster, never the node's files. A token's secret is in the
// result of Create and nowhere else: no progress line, no error, no list.
// AdmitWorkers is `kubeboot config fleet --kubeconfig`: it makes a fleet's
// workers' node-bound tokens in the running cluster.
// The tokens' format and Secret are package bootstraptoken's; their
// create, list and delete through the API, which init's bootstrap-token
// phase shares, are package phases'.
package tokens

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/discovery"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/files"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/pki"
)

// Cluster is what the token operations work on: an API client with an
// administrator's identity, and what a join command and a discovery file
// name of the cluster.
type Cluster struct {
	// Client reaches the API server as an administrator.
	Client kubernetes.Interface
	// Report is where the operations say what they did.
	Report *output.Reporter
	// Name is the cluster's name, as a discovery file names it.
	Name string
	// Endpoint is the host:port joining nodes reach the API at.
	Endpoint string
	// CA is the cluster CA's certificate, which joining nodes pin.
	CA []byte
	// TTL is how long a new token stays valid unless told otherwise.
	TTL time.Duration
}

// Connect reads a control-plane node's admin.conf and builds its API
// client with newClient; the cluster is as the node's configuration and
// CA say.
func Connect(s *phases.Node, newClient func(kubeconfig []byte) (kubernetes.Interface, error)) (Cluster, error) {
	path := s.Config.KubeconfigPath(config.KubeconfigAdmin)
	kubeconfig, err := s.Files.ReadFile(path)
	if err != nil {
		return Cluster{}, fmt.Errorf("read %q (the token commands use admin.conf; pass the node's --config, or --kubeconfig): %w", path, err)
	}
	client, err := newClient(kubeconfig)
	if err != nil {
		return Cluster{}, fmt.Errorf("load %q: %w", path, err)
	}
	caPath := s.Config.CertPath(config.CertCA)
	ca, err := s.Files.ReadFile(caPath)
	if err != nil {
		return Cluster{}, fmt.Errorf("read %q (run `kubeboot init phase certs` first): %w", caPath, err)
	}
	return Cluster{Client: client, Report: s.Report, Name: s.Config.ClusterName, Endpoint: phases.JoinEndpoint(s.Config), CA: ca,
		TTL: s.Config.BootstrapToken.TTL.Duration}, nil
}

// ConnectClient is the cluster behind an administrator's client, from any
// machine: as it publishes itself to joining nodes, the endpoint and CA of
// the cluster-info ConfigMap in kube-public, its name as kube-system's
// kubeadm-config says (else config.DefaultClusterName). A new token is
// valid for config.DefaultBootstrapTokenTTL unless told otherwise.
func ConnectClient(ctx context.Context, client kubernetes.Interface, report *output.Reporter) (Cluster, error) {
	published, err := discovery.Published(ctx, client)
	if err != nil {
		return Cluster{}, err
	}
	return Cluster{Client: client, Report: report, Name: published.Name, Endpoint: published.Endpoint(), CA: published.CA,
		TTL: config.DefaultBootstrapTokenTTL}, nil
}

// CreateOptions say how Create makes a token, and what becomes of its
// discovery file.
type CreateOptions struct {
	// TTL is how long the token stays valid; zero for the configuration's
	// bootstrapToken.ttl.
	TTL time.Duration
	// Description says what the token is for; it is stored with it.
	Description string
	// DiscoveryFile, if not empty, is where to write the discovery file:
	// atomically, mode 0600, its directory created private if missing.
	DiscoveryFile string
	// DiscoveryContent asks for the discovery file's content in
	// Created.Discovery, instead of a file.
	DiscoveryContent bool
}

// Created is a token Create made, as `kubeboot token create -o json`
// prints it, once.
type Created struct {
	// ID is the token's ID, the public half.
	ID string `json:"id"`
	// Token is the whole token, its secret included.
	Token string `json:"token"`
	// Expires is when the token stops being valid.
	Expires time.Time `json:"expires"`
	// JoinCommand joins a worker with the token (see phases.JoinCommand).
	JoinCommand string `json:"joinCommand"`
	// DiscoveryFile is the absolute path of the discovery file written,
	// if CreateOptions.DiscoveryFile asked for one.
	DiscoveryFile string `json:"discoveryFile,omitempty"`
	// Discovery is the discovery file's content, if
	// CreateOptions.DiscoveryContent asked for it. It holds the token.
	Discovery []byte `json:"-"`
}

// Create creates a token for joining nodes (phases.CreateToken), created
// by `kubeboot token create`, valid from now, and reports its Secret
// without the secret. When the discovery file cannot be written, the
// token is deleted again: a token nobody got is a credential for nothing.
func Create(ctx context.Context, c Cluster, opts CreateOptions, now time.Time) (Created, error) {
	hash, err := pki.CACertHash(c.CA)
	if err != nil {
		return Created{}, fmt.Errorf("the cluster CA: %w", err)
	}
	ttl := opts.TTL
	if ttl == 0 {
		ttl = c.TTL
	}
	info, err := phases.CreateToken(ctx, c.Client, ttl, opts.Description, phases.CreatedByTokenCreate, now)
	if err != nil {
		return Created{}, err
	}
	expires := info.Expires.Format(time.RFC3339)
	c.Report.Infof("Secret %s/%s created: token %s, valid until %s", bootstraptoken.Namespace, bootstraptoken.SecretName(info.Token.ID), info.Token.ID, expires)
	res := Created{ID: info.Token.ID, Token: info.Token.Value(), Expires: info.Expires, JoinCommand: phases.JoinCommand(c.Endpoint, info.Token, hash)}
	if opts.DiscoveryContent {
		if res.Discovery, err = c.discoveryKubeconfig(info.Token); err != nil {
			return Created{}, err
		}
	}
	if opts.DiscoveryFile != "" {
		if res.DiscoveryFile, err = c.writeDiscoveryFile(opts.DiscoveryFile, info.Token); err != nil {
			if delErr := phases.DeleteToken(context.WithoutCancel(ctx), c.Client, info.Token.ID); delErr != nil {
				err = errors.Join(err, delErr)
			}
			return Created{}, err
		}
		c.Report.Infof("wrote the discovery file %s (mode 0600); the token in it expires at %s", res.DiscoveryFile, expires)
	}
	return res, nil
}

// CheckDiscoveryFile refuses a discovery file path that Create could not
// write (see files.CheckTarget), before any token is created.
func CheckDiscoveryFile(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return &exit.UsageError{Msg: "--discovery-file " + path + ": " + err.Error()}
	}
	return files.CheckTarget("--discovery-file", abs)
}

// discoveryKubeconfig is the kubeconfig of `join --discovery-file` for
// token: the cluster's CA and endpoint, and the token.
func (c Cluster) discoveryKubeconfig(token bootstraptoken.Token) ([]byte, error) {
	return pki.DiscoveryKubeconfig(c.Name, "https://"+c.Endpoint, c.CA, token.Value())
}

// writeDiscoveryFile writes the kubeconfig of `join --discovery-file`
// atomically, mode 0600, and returns its absolute path. Its directory,
// which is not kubeboot's, is created private if it is missing.
func (c Cluster) writeDiscoveryFile(path string, token bootstraptoken.Token) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", &exit.UsageError{Msg: "--discovery-file " + path + ": " + err.Error()}
	}
	data, err := c.discoveryKubeconfig(token)
	if err != nil {
		return "", err
	}
	if err := (&files.AtomicWriter{}).MkdirMissing(filepath.Dir(abs), 0o700); err != nil {
		return "", err
	}
	if err := files.WriteTarget("--discovery-file", abs, data, 0o600); err != nil {
		return "", err
	}
	return abs, nil
}

// Listed is one token as List lists it: everything but its secret.
type Listed struct {
	// ID is the token's ID.
	ID string `json:"id"`
	// Expires is when the token stops being valid; zero for never.
	Expires time.Time `json:"expires,omitzero"`
	// Usages are what the token may be used for.
	Usages []string `json:"usages"`
	// Groups are the extra groups the token authenticates as.
	Groups []string `json:"groups"`
	// Description says what the token is for.
	Description string `json:"description,omitempty"`
	// CreatedBy says what created it (see phases.CreatedByInit).
	CreatedBy string `json:"createdBy,omitempty"`
}

// List lists the cluster's bootstrap tokens, soonest to expire first, and
// warns of each token Secret it cannot read.
func List(ctx context.Context, c Cluster) ([]Listed, error) {
	tokens, problems, err := phases.ListTokens(ctx, c.Client, "")
	if err != nil {
		return nil, err
	}
	for _, p := range problems {
		c.Report.Warnf("%v", p)
	}
	rows := make([]Listed, len(tokens))
	for i, t := range tokens {
		rows[i] = Listed{ID: t.Token.ID, Expires: t.Expires, Usages: append([]string{}, t.Usages...), Groups: append([]string{}, t.Groups...),
			Description: t.Description, CreatedBy: t.CreatedBy}
	}
	return rows, nil
}

// IDs reads what names tokens to delete: token IDs or whole tokens. One
// that is neither is never quoted, since it may be a mistyped token.
func IDs(args []string) ([]string, error) {
	ids := make([]string, len(args))
	for i, arg := range args {
		if bootstraptoken.ValidID(arg) {
			ids[i] = arg
			continue
		}
		t, err := bootstraptoken.Parse(arg)
		if err != nil {
			return nil, &exit.UsageError{Msg: fmt.Sprintf("argument %d is neither a token ID (6 characters of [a-z0-9]) nor a token", i+1)}
		}
		ids[i] = t.ID
	}
	return ids, nil
}

// Delete deletes the tokens with these IDs in order, reporting each, and
// returns the IDs it deleted: all of them, or those before the one it
// could not delete, with the error.
func Delete(ctx context.Context, c Cluster, ids []string) ([]string, error) {
	deleted := []string{}
	for _, id := range ids {
		if err := phases.DeleteToken(ctx, c.Client, id); err != nil {
			return deleted, err
		}
		deleted = append(deleted, id)
		c.Report.Infof("Secret %s/%s deleted: token %s", bootstraptoken.Namespace, bootstraptoken.SecretName(id), id)
	}
	return deleted, nil
}
