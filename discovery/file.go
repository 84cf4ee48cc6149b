package discovery

import (
	"context"
	"fmt"
	"net/url"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubeboot/kubeboot/bootstraptoken"
	"github.com/kubeboot/kubeboot/inputfile"
)

// FromFile discovers the cluster from a discovery file: a kubeconfig
// whose current context's cluster embeds the CA and names the server, as
// `kubeboot token create --discovery-file` writes it. The file is trusted
// as it is, as kubeadm trusts it; its user's token, if any, is the TLS
// bootstrap credential. The server must then answer a read of
// cluster-info over TLS verified with the file's CA, which proves that it
// is reachable and of that CA; FromFile retries as ByToken does.
func FromFile(ctx context.Context, path string, opts Options) (*Cluster, error) {
	data, err := inputfile.Read(path, inputfile.ConfigLimit)
	if err != nil {
		return nil, fmt.Errorf("read discovery file %q: %w", path, err)
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("read discovery file %q: not a kubeconfig: %w", path, err)
	}
	current := cfg.Contexts[cfg.CurrentContext]
	if current == nil || cfg.Clusters[current.Cluster] == nil {
		return nil, fmt.Errorf("read discovery file %q: its current context %q names no cluster: write it with `kubeboot token create --discovery-file`", path, cfg.CurrentContext)
	}
	from := fmt.Sprintf("discovery file %q", path)
	cluster := cfg.Clusters[current.Cluster]
	c, err := newCluster(from, current.Cluster, cluster.Server, cluster.CertificateAuthorityData)
	if err != nil {
		return nil, err
	}
	if user := cfg.AuthInfos[current.AuthInfo]; user != nil && user.Token != "" {
		if c.Token, err = bootstraptoken.Parse(user.Token); err != nil {
			// Parse never quotes its input.
			return nil, fmt.Errorf("read the token of %s: %w", from, err)
		}
	}
	u, err := url.Parse(c.Server)
	if err != nil {
		return nil, fmt.Errorf("read the server of %s: %w", from, err)
	}
	secure, err := verifyingClient(c.CA)
	if err != nil {
		return nil, err
	}
	_, err = retry(ctx, opts, func(ctx context.Context) (*Cluster, error) {
		if _, err := getClusterInfo(ctx, secure, u.Host); err != nil {
			return nil, err
		}
		return c, nil
	})
	if err != nil {
		return nil, fmt.Errorf("check the cluster of %s at %q: %w", from, u.Host, err)
	}
	return c, nil
}
