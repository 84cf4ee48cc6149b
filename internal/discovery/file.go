package discovery

import (
	"context"
	"fmt"
	"net/url"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/inputfile"
)

// fileFix is how to get a discovery file right, for every error about one.
const fileFix = "write it with `kubeboot token create --discovery-file FILE` on a control-plane node"

// FromFile discovers the cluster from a discovery file: a kubeconfig
// whose current context's cluster embeds the CA and names the server, as
// `kubeboot token create --discovery-file` writes it. The file is trusted
// as it is, as kubeadm trusts it; its user's token, if any, is the TLS
// bootstrap credential. The server must then answer a read of
// cluster-info over TLS verified with the file's CA, which proves that it
// is reachable and of that CA; FromFile retries as ByToken does. A file
// that cannot be read or is malformed is a usage error (exit 2), since no
// retry fixes it.
func FromFile(ctx context.Context, path string, opts Options) (*Cluster, error) {
	c, err := parseFile(path)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(c.Server)
	if err != nil {
		return nil, &exit.UsageError{Msg: fmt.Sprintf("discovery file %q: server: %v: %s", path, err, fileFix)}
	}
	secure, err := verifyingClient(c.CA)
	if err != nil {
		return nil, &exit.UsageError{Msg: fmt.Sprintf("discovery file %q: certificate-authority-data: %v: %s", path, err, fileFix)}
	}
	from := fmt.Sprintf("discovery file %q", path)
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

// CheckFile refuses a discovery file that cannot be read or is malformed,
// as FromFile would, without asking the cluster anything: a join checks
// its input before it takes the node lock.
func CheckFile(path string) error {
	_, err := parseFile(path)
	return err
}

// parseFile reads a discovery file; a file that cannot be read or is
// malformed is a usage error (exit 2) that says how to get it right.
func parseFile(path string) (*Cluster, error) {
	c, err := readFile(path)
	if err != nil {
		return nil, &exit.UsageError{Msg: err.Error() + ": " + fileFix}
	}
	return c, nil
}

// readFile reads and checks the discovery file at path: its current
// context's cluster, https server and CA, and its user's token if any.
func readFile(path string) (*Cluster, error) {
	data, err := inputfile.ReadYAML(path, inputfile.ConfigLimit, inputfile.ConfigNodes)
	if err != nil {
		return nil, fmt.Errorf("read discovery file %q: %w", path, err)
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("read discovery file %q: not a kubeconfig: %w", path, err)
	}
	current := cfg.Contexts[cfg.CurrentContext]
	if current == nil || cfg.Clusters[current.Cluster] == nil {
		return nil, fmt.Errorf("read discovery file %q: current-context: %q names no context with a cluster", path, cfg.CurrentContext)
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
			return nil, fmt.Errorf("read the token of %s (users[%q].user.token): %w", from, current.AuthInfo, err)
		}
	}
	return c, nil
}
