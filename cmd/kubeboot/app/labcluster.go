package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubeboot/kubeboot/lab"
	"github.com/kubeboot/kubeboot/output"
	"github.com/kubeboot/kubeboot/phases"
)

// clusterResult is `lab up --cluster`'s result.
type clusterResult struct {
	OK         bool          `json:"ok"`
	Kubeconfig string        `json:"kubeconfig"`
	Endpoint   string        `json:"endpoint"`
	Nodes      []clusterNode `json:"nodes"`
}

// clusterNode is one node of clusterResult.
type clusterNode struct {
	Name string `json:"name"`
	Role string `json:"role"`
	// Join is how a worker joined: kubeboot or kubeadm.
	Join    string `json:"join,omitempty"`
	Address string `json:"address"`
	// Took is how long the node's lab up took.
	Took string `json:"took"`
}

// clusterUp brings a lab cluster up: the network, the load balancer for
// several control-plane nodes, then each node in its own network namespace
// through `kubeboot lab up` (the first with init, the other control-plane
// nodes with join --control-plane and the first's certificate bundle), and
// finally the routes between the nodes' pod networks. A failure tears down
// what it started unless a node came up, so its logs can be read.
func (d deps) clusterUp(ctx context.Context, c *lab.Cluster, binDir string, report *output.Reporter) (result clusterResult, err error) {
	self, err := os.Executable()
	if err != nil {
		return result, fmt.Errorf("find the kubeboot binary: %w", err)
	}
	if binDir, err = filepath.Abs(binDir); err != nil {
		return result, err
	}
	report.SetPhase("lab")
	if err := c.SetUpNetwork(ctx); err != nil {
		_ = clusterDown(context.WithoutCancel(ctx), c, report)
		return result, err
	}
	report.Infof("network: namespaces %s (the bridge, on %s) and kb-%s-<node>", c.Hub(), c.HubAddress(), c.Name)
	for _, i := range c.ControlPlanes() {
		n := c.Nodes[i]
		cfg, err := c.NodeConfig(i)
		if err == nil {
			err = os.MkdirAll(c.NodeDir(n.Name), 0o700)
		}
		if err == nil {
			err = os.WriteFile(c.NodeConfigPath(n.Name), cfg, 0o600)
		}
		if err != nil {
			return result, err
		}
	}
	hostEndpoint, err := startLoadBalancer(ctx, c)
	if err != nil {
		return result, err
	}
	report.Infof("load balancer on %s, and on %s for this host (log: %s)", c.Endpoint(), hostEndpoint, c.LoadBalancer().LogFile())
	first := c.Nodes[0].Name
	if c.Nodes[0].Init == lab.JoinKubeadm {
		return d.kubeadmClusterUp(ctx, c, self, binDir, hostEndpoint, report)
	}
	var joinFlags []string
	for _, i := range c.ControlPlanes() {
		args := []string{"--bin-dir", binDir}
		if i > 0 {
			if joinFlags == nil {
				if joinFlags, err = exportBundle(ctx, c, self); err != nil {
					return result, err
				}
			}
			args = append(args, joinFlags...)
		}
		node, err := d.nodeUp(ctx, c, i, self, args, report)
		if err != nil {
			return result, err
		}
		result.Nodes = append(result.Nodes, node)
	}
	workers, err := d.workersUp(ctx, c, self, binDir, report)
	if err != nil {
		return result, err
	}
	result.Nodes = append(result.Nodes, workers...)
	result.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	if err := hostKubeconfig(filepath.Join(c.NodeDir(first), "admin.conf"), result.Kubeconfig, hostEndpoint); err != nil {
		return result, err
	}
	if err := routePods(ctx, c, result.Kubeconfig); err != nil {
		return result, err
	}
	report.Infof("pod networks routed between the nodes")
	if err := d.waitAddons(ctx, c, result.Kubeconfig, report); err != nil {
		return result, err
	}
	report.Infof("use it: kubectl --kubeconfig %s get nodes", result.Kubeconfig)
	result.OK, result.Endpoint = true, hostEndpoint
	return result, nil
}

// kubeadmClusterUp brings up a cluster that the real kubeadm inits: its
// one node, with `lab up --kubeadm-init` and the kubeadm configuration of
// lab.Cluster.KubeadmInitConfig, and the host's kubeconfig. kubeadm leaves
// kube-proxy out there (see kubeadmInitRole), so there are no addons to
// wait for.
func (d deps) kubeadmClusterUp(ctx context.Context, c *lab.Cluster, self, binDir, hostEndpoint string, report *output.Reporter) (clusterResult, error) {
	var result clusterResult
	first := c.Nodes[0].Name
	kubeadmConfig := filepath.Join(c.NodeDir(first), "kubeadm.yaml")
	data, err := c.KubeadmInitConfig()
	if err == nil {
		err = os.WriteFile(kubeadmConfig, data, 0o600)
	}
	if err != nil {
		return result, err
	}
	node, err := d.nodeUp(ctx, c, 0, self, []string{"--bin-dir", binDir, "--kubeadm-init", kubeadmConfig}, report)
	if err != nil {
		return result, err
	}
	result.Nodes = append(result.Nodes, node)
	result.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	adminConf := filepath.Join(c.NodeDir(first), "lab", "overlay", "etc", "kubernetes", "admin.conf")
	if err := hostKubeconfig(adminConf, result.Kubeconfig, hostEndpoint); err != nil {
		return result, err
	}
	report.Infof("use it: kubectl --kubeconfig %s get nodes", result.Kubeconfig)
	result.OK, result.Endpoint = true, hostEndpoint
	return result, nil
}

// nodeLogName is the file in a node's dir that keeps its `lab up -o json`
// events, whose stages make bench times.
const nodeLogName = "lab-up.json"

// nodeUp runs `lab up` with args for the cluster's i-th node in its
// network namespace, keeps its events in the node's dir, and returns the
// node's line of the result.
func (d deps) nodeUp(ctx context.Context, c *lab.Cluster, i int, self string, args []string, report *output.Reporter) (clusterNode, error) {
	n := c.Nodes[i]
	start := time.Now()
	log, err := os.Create(filepath.Join(c.NodeDir(n.Name), nodeLogName))
	if err != nil {
		return clusterNode{}, err
	}
	defer func() { _ = log.Close() }()
	var stdout, stderr bytes.Buffer
	args = append([]string{"lab", "up", "--config", c.NodeConfigPath(n.Name), "-o", "json"}, args...)
	binary := self
	if n.Join == lab.JoinKubeadm || n.Init == lab.JoinKubeadm {
		// kubeadm's node gets a mount namespace of its own, which its
		// containerd and kubelet keep (see lab.KubeadmNode.Isolate).
		binary, args = "unshare", append([]string{"--mount", "--propagation", "private", "--", self}, args...)
	}
	cmd := lab.InNamespace(ctx, c.Netns(n.Name), binary, args...)
	cmd.Stdout, cmd.Stderr = io.MultiWriter(&stdout, log), &stderr
	if d.cpuProfile != "" {
		cmd.Env = append(os.Environ(), cpuProfileEnv+"="+strings.TrimSuffix(d.cpuProfile, ".pprof")+"-"+n.Name+".pprof")
	}
	if err := cmd.Run(); err != nil {
		return clusterNode{}, fmt.Errorf("node %s: lab up: %w\n%s(the lab stays up for a look at its logs in %s; stop it with `kubeboot lab down --cluster`)",
			n.Name, err, lastLines(stdout.String()+stderr.String(), 20), c.NodeDir(n.Name))
	}
	took := time.Since(start).Round(10 * time.Millisecond)
	report.Infof("node %s (%s, %s) up in %s", n.Name, n.Role, c.Address(i), took)
	return clusterNode{Name: n.Name, Role: n.Role, Join: n.Join, Address: c.Address(i).String(), Took: took.String()}, nil
}

// workersUp joins the cluster's workers, all at once, with a new bootstrap
// token of the first node's: each writes its WorkerConfiguration, and runs
// lab up with kubeboot join (the token and the CA's hash) or with the
// real kubeadm join (the token's discovery file). It returns the workers'
// lines of the result, in the description's order.
func (d deps) workersUp(ctx context.Context, c *lab.Cluster, self, binDir string, report *output.Reporter) ([]clusterNode, error) {
	var workers []int
	for i, n := range c.Nodes {
		if n.Role == lab.RoleWorker {
			workers = append(workers, i)
		}
	}
	if len(workers) == 0 {
		return nil, nil
	}
	discoveryFile := filepath.Join(c.Dir, "discovery.conf")
	discovery, err := createToken(ctx, c, self, discoveryFile)
	if err != nil {
		return nil, err
	}
	// Each worker imports its images first; their joins then start at once.
	startFile := filepath.Join(c.Dir, "workers.start")
	if err := os.Remove(startFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	nodes := make([]clusterNode, len(workers))
	errs := make([]error, len(workers))
	ended := make([]atomic.Bool, len(workers))
	var wg sync.WaitGroup
	for k, i := range workers {
		n := c.Nodes[i]
		cfg, err := c.WorkerConfig(i, discovery)
		if err == nil {
			err = os.MkdirAll(c.NodeDir(n.Name), 0o700)
		}
		if err == nil {
			err = os.WriteFile(c.NodeConfigPath(n.Name), cfg, 0o600)
		}
		if err != nil {
			return nil, err
		}
		args := []string{"--bin-dir", binDir, "--start-after", startFile}
		if n.Join == lab.JoinKubeadm {
			args = append(args, "--kubeadm-join", discoveryFile)
		}
		wg.Go(func() {
			nodes[k], errs[k] = d.nodeUp(ctx, c, i, self, args, report)
			ended[k].Store(true)
		})
	}
	err = startTogether(ctx, c, workers, ended, startFile)
	wg.Wait()
	return nodes, errors.Join(append(errs, err)...)
}

// startTogether creates startFile once every worker's images are in (its
// lab-up.json marks images-ready) or its lab up ended, so that the joins
// start at once, as on machines provisioned beforehand.
func startTogether(ctx context.Context, c *lab.Cluster, workers []int, ended []atomic.Bool, startFile string) error {
	err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		for k, i := range workers {
			log, _ := os.ReadFile(filepath.Join(c.NodeDir(c.Nodes[i].Name), nodeLogName))
			if !ended[k].Load() && !bytes.Contains(log, []byte(`"stage":"`+stageImagesReady+`"`)) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	return os.WriteFile(startFile, nil, 0o600)
}

// createToken creates a bootstrap token on the first node for the
// workers, with its discovery file, and returns the token and the CA's
// hash.
func createToken(ctx context.Context, c *lab.Cluster, self, discoveryFile string) (lab.Discovery, error) {
	first := c.Nodes[0].Name
	var stdout, stderr bytes.Buffer
	cmd := lab.InNamespace(ctx, c.Netns(first), self, "token", "create", "--config", c.NodeConfigPath(first),
		"--description", "kubeboot lab: the workers' join", "--discovery-file", discoveryFile, "-o", "json")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return lab.Discovery{}, fmt.Errorf("node %s: token create: %w: %s", first, err, strings.TrimSpace(stderr.String()))
	}
	var out struct {
		Result createdToken `json:"result"`
	}
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		if strings.HasPrefix(line, `{"result"`) {
			if err := json.Unmarshal([]byte(line), &out); err != nil {
				return lab.Discovery{}, fmt.Errorf("node %s: token create's result: %w", first, err)
			}
		}
	}
	fields := strings.Fields(out.Result.JoinCommand)
	hash := ""
	for j, f := range fields {
		if f == "--discovery-token-ca-cert-hash" && j+1 < len(fields) {
			hash = fields[j+1]
		}
	}
	if out.Result.Token == "" || hash == "" {
		return lab.Discovery{}, fmt.Errorf("node %s: token create printed no token and CA hash", first)
	}
	return lab.Discovery{Token: out.Result.Token, CAHash: hash}, nil
}

// startLoadBalancer starts the lab's load balancer with a socket on a free
// port of this host's loopback, and returns that endpoint.
func startLoadBalancer(ctx context.Context, c *lab.Cluster) (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("listen on the host's loopback for the lab: %w", err)
	}
	defer func() { _ = l.Close() }()
	f, err := l.(*net.TCPListener).File()
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	if err := c.StartLoadBalancer(ctx, f); err != nil {
		return "", err
	}
	return l.Addr().String(), nil
}

// hostKubeconfig writes admin.conf for this host: through the load
// balancer's loopback endpoint, verifying the API server's certificate
// for the name "kubernetes", one of its SANs, as kind's kubeconfig does
// for its port mapping.
func hostKubeconfig(adminConf, path, endpoint string) error {
	cfg, err := clientcmd.LoadFromFile(adminConf)
	if err != nil {
		return fmt.Errorf("load %s: %w", adminConf, err)
	}
	for _, cluster := range cfg.Clusters {
		cluster.Server = "https://" + endpoint
		cluster.TLSServerName = "kubernetes"
	}
	return clientcmd.WriteToFile(*cfg, path)
}

// exportBundle exports the first node's cluster secrets for the other
// control-plane nodes, and returns lab up's flags that join with them. The
// bundle and its key are kept apart, as `certs export` asks.
func exportBundle(ctx context.Context, c *lab.Cluster, self string) ([]string, error) {
	first := c.Nodes[0].Name
	bundle := filepath.Join(c.Dir, "secrets.bundle")
	var stdout, stderr bytes.Buffer
	cmd := lab.InNamespace(ctx, c.Netns(first), self, "certs", "export", "--config", c.NodeConfigPath(first), "--out", bundle)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("node %s: certs export: %w: %s", first, err, strings.TrimSpace(stderr.String()))
	}
	keyFile := filepath.Join(c.NodeDir(first), "kubeboot", "bundle.key")
	if err := os.WriteFile(keyFile, stdout.Bytes(), 0o600); err != nil {
		return nil, err
	}
	return []string{"--control-plane", "--certs-bundle", bundle, "--key-file", keyFile}, nil
}

// routePods waits until the controller-manager gave every node its pod
// CIDRs, then routes them between the nodes.
func routePods(ctx context.Context, c *lab.Cluster, kubeconfig string) error {
	client, err := hostClient(kubeconfig)
	if err != nil {
		return err
	}
	podCIDRs := map[string][]string{}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil // the API server may still be settling: poll again
		}
		for _, n := range nodes.Items {
			podCIDRs[n.Name] = n.Spec.PodCIDRs
		}
		for _, n := range c.Nodes {
			if len(podCIDRs[n.Name]) == 0 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("wait for every node's pod CIDRs (have %v): %w", podCIDRs, err)
	}
	return c.AddPodRoutes(ctx, podCIDRs)
}

// addonsTimeout bounds the wait for the addons of a lab cluster: their
// pods start once the pod networks are routed, from images on the nodes.
const addonsTimeout = 3 * time.Minute

// waitAddons waits until the addons that the first node's configuration
// turns on are rolled out: a lab is up once its pods get DNS and Services.
func (d deps) waitAddons(ctx context.Context, c *lab.Cluster, kubeconfig string, report *output.Reporter) error {
	cfg, err := d.loadCluster(c.NodeConfigPath(c.Nodes[0].Name))
	if err != nil {
		return err
	}
	client, err := hostClient(kubeconfig)
	if err != nil {
		return err
	}
	return phases.WaitAddonsRolledOut(ctx, &phases.Node{Run: &phases.Run{API: client, Report: report}, Config: cfg}, addonsTimeout)
}

// hostClient is an API client through the lab's host kubeconfig.
func hostClient(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", kubeconfig, err)
	}
	return kubernetes.NewForConfig(cfg)
}

// clusterDown tears a lab cluster down: each node as `lab down` does, the
// load balancer, the network, and the lab's directory.
func clusterDown(ctx context.Context, c *lab.Cluster, report *output.Reporter) error {
	report.SetPhase("lab")
	var errs []error
	for i := len(c.Nodes) - 1; i >= 0; i-- {
		dir := c.NodeDir(c.Nodes[i].Name)
		node := lab.Node{Dir: filepath.Join(dir, "lab"), Socket: filepath.Join(dir, "cri.sock")}
		if err := node.Down(ctx, func(format string, args ...any) {
			report.Infof("node %s: "+format, append([]any{c.Nodes[i].Name}, args...)...)
		}); err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", c.Nodes[i].Name, err))
		}
	}
	if err := c.LoadBalancer().Stop(10 * time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := c.TearDownNetwork(ctx); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		return err
	}
	report.Infof("removed the network and %s", c.Dir)
	return nil
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.SplitAfter(strings.TrimRight(s, "\n")+"\n", "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}
