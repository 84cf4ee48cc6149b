package phases

import (
	"context"
	"time"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/discovery"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/pki"
)

// Discover finds and verifies the cluster as d says, within timeout.
func Discover(ctx context.Context, s *workflow.Run, d config.Discovery, timeout time.Duration) (*discovery.Cluster, error) {
	opts := discovery.Options{Timeout: timeout, Progress: func(msg string) { s.Report.Infof("%s", msg) }}
	var token bootstraptoken.Token
	var err error
	if d.Token != "" {
		if token, err = bootstraptoken.Parse(d.Token); err != nil {
			return nil, &exit.UsageError{Msg: "--token: " + err.Error()}
		}
	}
	var c *discovery.Cluster
	via := "token " + token.ID
	if d.File != "" {
		via = "discovery file " + d.File
		c, err = discovery.FromFile(ctx, d.File, opts)
		if err == nil && d.Token != "" {
			c.Token = token // --token is the TLS bootstrap credential then
		}
	} else {
		c, err = discovery.ByToken(ctx, d.APIServerEndpoint, token, d.CACertHashes, opts)
	}
	if err != nil {
		return nil, err
	}
	s.Report.Infof("discovered the cluster at %s through %s; its CA has hash %s", c.Server, via, c.CAHash)
	return c, nil
}

// errNoToken is the failure of a join without a TLS bootstrap credential.
var errNoToken = &exit.UsageError{Msg: "no bootstrap token for the kubelet's TLS bootstrap: the discovery file's user holds none: pass --token"}

// BootstrapKubeconfig is bootstrap-kubelet.conf's content for c.
func BootstrapKubeconfig(c *discovery.Cluster) ([]byte, error) {
	if c.Token == (bootstraptoken.Token{}) {
		return nil, errNoToken
	}
	return pki.DiscoveryKubeconfig(c.Name, c.Server, c.CA, c.Token.Value())
}
