package worker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/discovery"
	"github.com/kubeboot/kubeboot/internal/procnet"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/pki"
)

// Preflight discovers the cluster and checks that this node can join
// it as a worker: nothing else listens on the kubelet's port, no file of
// another cluster is in the way, and no Ready Node of another machine has
// this node's name. A node that joined already passes, so a re-run
// converges.
var Preflight = workflow.Phase[*Node]{
	Name:  "preflight",
	Short: "Discover the cluster and check that this node can join it as a worker",
	Run:   runPreflight,
}

func runPreflight(ctx context.Context, s *Node) error {
	w := s.Config
	c, err := discovered(ctx, s)
	if err != nil {
		return err
	}
	// A broken kubelet.conf fails its check; the others take it for none.
	own, ownErr := readKubeletConf(s, w)
	host, port := phases.KubeletAddress(w.Kubelet.ExtraConfig)
	checks := []phases.Check{{Name: "IsPrivilegedUser", Run: func(context.Context) error { return checkRoot(w) }}}
	checks = append(checks, phases.HostChecks(s.Run, phases.ThisHost(), phases.KubeletNeeds(w.Kubelet.ExtraConfig, w.Kubelet.ContainerRuntimeEndpoint))...)
	return phases.RunChecks(ctx, s.Run, append(checks, []phases.Check{
		{Name: "KubeletConf", Run: func(context.Context) error { return checkKubeletConf(w, c, own, ownErr) }},
		{Name: "ClusterCA", Run: func(context.Context) error { return checkClusterCA(s, w, c) }},
		{Name: "Port-" + strconv.Itoa(port), Run: func(context.Context) error { return checkKubeletPort(s, w, c, own, host, port) }},
		{Name: "NodeName", Run: func(ctx context.Context) error { return checkNodeName(ctx, s, w, c, own) }},
	}...))
}

func checkRoot(w *config.WorkerConfiguration) error {
	if os.Geteuid() == 0 {
		return nil
	}
	return fmt.Errorf("joining writes %s and %s and restarts the kubelet: run as root", w.Paths.KubeconfigDir, w.Kubelet.ConfigFile)
}

// checkKubeletConf refuses a kubelet.conf of another cluster, or of this
// cluster as another node: the kubelet would keep using it.
func checkKubeletConf(w *config.WorkerConfiguration, c *discovery.Cluster, own *kubeconfigIdentity, err error) error {
	path := w.KubeconfigPath(config.KubeconfigKubelet)
	switch {
	case err != nil:
		return fmt.Errorf("%w: stop the kubelet and remove it", err)
	case own == nil:
		return nil
	case own.caHash != c.CAHash:
		return fmt.Errorf("%s belongs to another cluster: it trusts the CA %s, the cluster's is %s: stop the kubelet and remove it, and the kubelet's certificates, first", path, own.caHash, c.CAHash)
	case own.node != "" && own.node != w.Node.Name:
		return fmt.Errorf("%s is the kubelet's credential as node %s, not %s: join with --node-name %s, or stop the kubelet and remove it first", path, own.node, w.Node.Name, own.node)
	}
	return nil
}

// checkClusterCA refuses a CA file of another cluster: the kubelet would
// authenticate clients with the wrong CA. A CA re-issued with the same key
// has the same pin, and is replaced.
func checkClusterCA(s *Node, w *config.WorkerConfiguration, c *discovery.Cluster) error {
	have, err := s.Files.ReadFile(w.CAPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %q: %w", w.CAPath(), err)
	}
	if hash, err := pki.CACertHash(have); err != nil || hash != c.CAHash {
		return fmt.Errorf("%s holds another CA than the cluster's (%s): this node has another cluster's files: remove it first (certificates.dir)", w.CAPath(), c.CAHash)
	}
	return nil
}

// checkKubeletPort fails when something listens where the kubelet will,
// unless this node's kubelet of this cluster does: a re-run.
func checkKubeletPort(s *Node, w *config.WorkerConfiguration, c *discovery.Cluster, own *kubeconfigIdentity, host string, port int) error {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		return ln.Close()
	}
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		bootstrap, _ := readIdentity(s, w.KubeconfigPath(config.KubeconfigBootstrapKubelet))
		if own.joined(w, c) || bootstrap != nil && bootstrap.caHash == c.CAHash {
			s.Report.Infof("%s is in use: by this node's kubelet, which holds this cluster's credentials (a re-run)", addr)
			return nil
		}
		holder := ""
		if p, err := procnet.Listener(host, port); err == nil {
			holder = " by pid " + strconv.Itoa(p.PID)
		}
		return fmt.Errorf("%s, where the kubelet listens, is in use%s: stop what listens there (`ss -ltnp 'sport = :%d'`), such as a kubelet of another cluster (`systemctl stop kubelet`)", addr, holder, port)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return fmt.Errorf("%s is not an address of this host: fix kubelet.extraConfig.address", host)
	}
	return fmt.Errorf("listen on %s: %w", addr, err)
}

// checkNodeName refuses a Node of this name that is Ready, unless it is
// this node's own: another machine has the name. As kubeadm, it aborts on
// any error but NotFound, a refused GET included.
func checkNodeName(ctx context.Context, s *Node, w *config.WorkerConfiguration, c *discovery.Cluster, own *kubeconfigIdentity) error {
	client, err := tokenClient(ctx, s)
	if err != nil {
		return err
	}
	name := w.Node.Name
	node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsForbidden(err):
		return fmt.Errorf("get Node %q with token %s: %w: `kubeboot init phase bootstrap-token` on a control-plane node grants bootstrap tokens kubeadm:get-nodes", name, c.Token.ID, err)
	case err != nil:
		return fmt.Errorf("get Node %q: %w", name, err)
	case own.joined(w, c):
		s.Report.Infof("Node %s exists, and this node's kubelet.conf is its credential (a re-run)", name)
		return nil
	case !phases.NodeReady(node):
		s.Report.Warnf("a Node %s exists and is not Ready: this node's kubelet takes it over", name)
		return nil
	}
	return fmt.Errorf("a Node %s is Ready in the cluster, and this node holds no credential of it: another machine has this name: join with another --node-name, "+
		"or, if that machine is gone, delete its Node (`kubectl delete node %s`) first", name, name)
}
