package lab

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/fleet"
	"github.com/kubeboot/kubeboot/internal/machine"
	"github.com/kubeboot/kubeboot/internal/output"
)

// Lab is a lab cluster on this host, whose nodes are machines (package
// machine): its description, and what it is brought up with. Up brings
// it up as a fleet of provisioned nodes comes up: every node's one file
// is written onto its disk before any boots, by the fleet's code (a
// fresh bootstrap token and certificate key, the cluster CA made
// beforehand and carried in the first node's file, so the others pin its
// hash), all boot at once, and each brings
// itself up through kubeboot's bootstrap unit (a kubeadm worker through
// `kubeadm join`, run in it as an operator would); the lab only watches
// them from outside. Boot brings it up as far as the boot, each node
// with the file its caller chooses; Down brings it down.
type Lab struct {
	// Cluster is the lab's description.
	Cluster *Cluster
	// BinDir holds the pinned binaries the nodes' packages and images
	// are made of.
	BinDir string
	// Kubeboot is the kubeboot binary the lab runs on this host (the
	// nodes' images list, the import of their images into the preloaded
	// store).
	Kubeboot string
	// Package is kubeboot's .deb (make package), which every node
	// installs with dpkg at its first boot, as a provisioned node does.
	Package string
	// Registry is the directory where Up and Boot register the lab and
	// Down unregisters it (DefaultRegistry; see List); "" registers
	// nothing.
	Registry string
}

// Event is a machine node's progress: one event of its bootstrap unit's
// JSON output, or the lab's own word on it.
type Event struct {
	// Node is the node's name.
	Node string
	// Phase, Level and Msg are the event's.
	Phase, Level, Msg string
}

// Result is what `lab up` reports.
type Result struct {
	OK bool `json:"ok"`
	// Kubeconfig is the host's admin kubeconfig, through Endpoint.
	Kubeconfig string `json:"kubeconfig"`
	// Endpoint is the load balancer's address on the host's loopback.
	Endpoint string       `json:"endpoint"`
	Nodes    []ResultNode `json:"nodes"`
}

// ResultNode is one node of Result.
type ResultNode struct {
	Name    string `json:"name"`
	Role    string `json:"role"`
	Join    string `json:"join,omitempty"`
	Address string `json:"address"`
	// Took is how long the node took from the fleet's boot until it was up.
	Took string `json:"took"`
}

// bootTimeout bounds a node's bring-up after its boot.
const bootTimeout = 10 * time.Minute

// machineKubelet is what every machine node's kubelet is told on top of
// kubeboot's defaults, for this host: its cgroups may be v1 and it may
// have swap; and its disk may be crowded, which must not evict the lab's
// pods.
var machineKubelet = map[string]any{
	"failCgroupV1": false,
	"failSwapOn":   false,
	"evictionHard": map[string]any{"imagefs.available": "0%", "nodefs.available": "0%", "nodefs.inodesFree": "0%"},
	// The images are preloaded once, into the node's containerd store;
	// nothing pulls them again.
	"imageGCHighThresholdPercent": 100,
}

// usrLayer is the layer of the nodes' packages over their /usr.
func (l Lab) usrLayer() string { return filepath.Join(l.Cluster.Dir, "usr") }

// packageFile is the lab's copy of Package, which the nodes see.
func (l Lab) packageFile() string { return filepath.Join(l.Cluster.Dir, "kubeboot.deb") }

// kubeletLayer holds the kubelet of the cluster's release when it is not
// the bin dir's own, as binDir/v<major>.<minor>/kubelet.
func (l Lab) kubeletLayer() string { return filepath.Join(l.Cluster.Dir, "kubelet") }

// Machine is the named node's machine.
func (l Lab) Machine(name string) (machine.Machine, error) {
	i := slices.IndexFunc(l.Cluster.Nodes, func(n ClusterNode) bool { return n.Name == name })
	if i < 0 {
		var names []string
		for _, n := range l.Cluster.Nodes {
			names = append(names, n.Name)
		}
		return machine.Machine{}, fmt.Errorf("%s: no node %q: its nodes are %s", l.Cluster.source, name, strings.Join(names, ", "))
	}
	return l.machine(i), nil
}

// machine is the i-th node's machine.
func (l Lab) machine(i int) machine.Machine {
	m := l.Cluster.Machine(i, l.Cluster.Dir, l.usrLayer(), l.packageFile())
	if _, err := os.Stat(l.kubeletLayer()); err == nil {
		m.UsrLayers = append(m.UsrLayers, l.kubeletLayer())
	}
	return m
}

// Up brings the lab up: the network, the load balancer (the host's way
// in, on a free port of its loopback), the nodes' packages and images,
// every node's disk, then all of them booted at once. It sends each
// node's progress to events, which the caller closes once Up returned,
// and waits until every node is up, the pod networks are routed, the
// addons are rolled out and the default StorageClass is served. A
// refusal (an InputError) set nothing up; a later failure leaves what was
// started for `lab down` (and the nodes' journals) to deal with.
func (l Lab) Up(ctx context.Context, events chan<- Event) (Result, error) {
	c := l.Cluster
	var res Result
	say := func(format string, args ...any) {
		events <- Event{Phase: "lab", Level: "info", Msg: fmt.Sprintf(format, args...)}
	}
	if err := l.checkNew(ctx); err != nil {
		return res, err
	}
	files, plan, err := l.nodeFiles()
	if err != nil {
		return res, &InputError{Err: err}
	}
	endpoint, err := l.setUp(ctx, say)
	if err != nil {
		return res, err
	}
	if err := l.install(ctx, files, plan); err != nil {
		return res, err
	}
	say("%d machines installed in %s", len(c.Nodes), c.Dir)
	start := time.Now()
	if err := l.bootAll(ctx); err != nil {
		return res, err
	}
	say("%d machines booted", len(c.Nodes))
	// The StorageClass is applied as soon as the first node is up, so that
	// its provisioner runs on the first worker Ready while the others join.
	first := l.machine(0)
	storage, stopStorage := context.WithCancel(ctx)
	defer stopStorage()
	firstUp, applied := make(chan struct{}), make(chan error, 1)
	go func() {
		select {
		case <-firstUp:
			applied <- applyStorage(storage, first)
		case <-storage.Done():
			applied <- storage.Err()
		}
	}()
	res.Nodes, err = l.waitNodes(ctx, files, start, events, firstUp)
	if err != nil {
		return res, err
	}
	res.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	if err := hostKubeconfig(filepath.Join(first.Root(), "etc/kubernetes/admin.conf"), res.Kubeconfig, endpoint); err != nil {
		return res, err
	}
	if err := <-applied; err != nil {
		return res, err
	}
	// The StorageClass's provisioner and the addons roll out at once, and
	// each is waited for at once: a kubectl run costs a few hundred
	// milliseconds even for what has rolled out.
	rollouts := [][]string{{"-n", storageNamespace, "rollout", "status", storageRollout, "--timeout=3m"}}
	for _, addon := range c.addonRollouts() {
		rollouts = append(rollouts, []string{"-n", "kube-system", "rollout", "status", addon, "--timeout=3m"})
	}
	errs := make([]error, len(rollouts))
	var wg sync.WaitGroup
	for i, args := range rollouts {
		wg.Go(func() { _, errs[i] = kubectl(ctx, first, args...) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	say("default StorageClass %s: %s rolled out", storageClassName, localPathProvisioner)
	say("use it: kubectl --kubeconfig %s get nodes", res.Kubeconfig)
	res.OK, res.Endpoint = true, endpoint
	return res, nil
}

// Inputs are what Boot gives a lab's nodes, in place of the files Up
// writes for them.
type Inputs struct {
	// Files are the nodes' files, in the order of the description's
	// nodes: the i-th node's kubeboot configuration, from which its
	// bootstrap unit brings it up at boot, or nil (or missing) for a node
	// its caller brings up itself, which gets neither file nor unit (see
	// InstallNode).
	Files [][]byte
	// ImageConfigs are kubeboot configurations whose images (`kubeboot
	// images list`) the nodes' containerd holds from their first boot,
	// with the sandbox image and Images.
	ImageConfigs [][]byte
	// Images are more images the nodes hold, such as a workload's.
	Images []Image
	// Cmdlines are kernel command lines, in the order of the nodes, for
	// nodes given no file: such a node boots from the network, its
	// bootstrap unit enabled to fetch its file as its command line says
	// (InstallFetchingNode). "" (or missing) leaves the node as Files
	// says.
	Cmdlines []string
}

// Boot brings the lab up for a caller that brings its nodes up itself,
// as the e2e suite does: Up's checks and registration (a lab that would
// collide with one that is up is refused), its network and load
// balancer, the nodes' packages, each node's machine installed with its
// file of in, the images of in preloaded, and all booted at once. It
// returns once every node has installed kubeboot's package and its
// containerd serves the images, and runs
// nothing in the nodes: only a node given a file brings itself up, by
// its bootstrap unit. A refusal (an InputError) set nothing up, and the
// lab it names may be another's: its caller must not bring it down.
// After any other error, as after a success, Down removes what Boot made.
func (l Lab) Boot(ctx context.Context, in Inputs) error {
	c := l.Cluster
	if len(in.Files) > len(c.Nodes) {
		return &InputError{Err: fmt.Errorf("%s: %d files for %d nodes", c.source, len(in.Files), len(c.Nodes))}
	}
	if err := l.checkNew(ctx); err != nil {
		return err
	}
	if _, err := l.setUp(ctx, func(string, ...any) {}); err != nil {
		return err
	}
	store, err := l.installShared(ctx, in.ImageConfigs, []string{SandboxImage}, in.Images)
	if err != nil {
		return err
	}
	for i := range c.Nodes {
		var file []byte
		if i < len(in.Files) {
			file = in.Files[i]
		}
		m := l.machine(i)
		install := func() error { return InstallNode(m, file) }
		if i < len(in.Cmdlines) && in.Cmdlines[i] != "" && file == nil {
			install = func() error { return InstallFetchingNode(m, in.Cmdlines[i]) }
		}
		if err := install(); err != nil {
			return fmt.Errorf("node %s: %w", m.Name, err)
		}
		if err := preloadNode(store, m.Root()); err != nil {
			return err
		}
	}
	if err := l.bootAll(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, bootTimeout)
	defer cancel()
	errs := make([]error, len(c.Nodes))
	var wg sync.WaitGroup
	for i := range c.Nodes {
		wg.Go(func() {
			if err := waitInstalled(ctx, l.machine(i)); err != nil {
				errs[i] = fmt.Errorf("node %s: %w", c.Nodes[i].Name, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// checkNew refuses, as an InputError, a lab that cannot be brought up
// here: one whose disks are left from a lab of its description not
// brought down, or whose extra mounts or feature gates are wrong. It sets
// nothing up.
func (l Lab) checkNew(ctx context.Context) error {
	c := l.Cluster
	for i := range c.Nodes {
		if m := l.machine(i); exists(m.Dir) {
			return &InputError{Err: fmt.Errorf("%s: node %s's disk %s exists: a lab of this description was not brought down; run `kubeboot lab down --cluster %s` first", c.source, m.Name, m.Dir, c.source)}
		}
	}
	if err := c.checkHostPaths(); err != nil {
		return &InputError{Err: err}
	}
	if err := checkPackage(l.Package); err != nil {
		return &InputError{Err: err}
	}
	return c.checkFeatureGates(ctx, l.BinDir)
}

// setUp registers the lab, refusing one that collides with a lab that is
// up or whose network is, or whose nodes would run out of the host's
// inotify instances (an InputError, before anything is set up), then
// sets up its network and its load balancer, which serves the host on a
// free port of its loopback: the endpoint it returns. It says what it set
// up.
func (l Lab) setUp(ctx context.Context, say func(format string, args ...any)) (string, error) {
	c := l.Cluster
	entry := l.entry()
	if l.Registry != "" {
		if err := l.checkCollisions(); err != nil {
			return "", &InputError{Err: err}
		}
	}
	if err := c.checkHub(); err != nil {
		return "", &InputError{Err: err}
	}
	listeners, err := c.listen()
	if err != nil {
		return "", err
	}
	defer listeners.close()
	// Last, as it depends on what else runs on the host now.
	limit, held, ok, err := HostInotify()
	if err != nil {
		return "", err
	}
	if ok {
		if err := c.checkInotify(limit, held); err != nil {
			return "", &InputError{Err: err}
		}
	}
	endpoint := listeners.api
	if l.Registry != "" {
		entry.Endpoint = endpoint
		if err := l.register(entry); err != nil {
			return "", err
		}
	}
	if err := c.SetUpNetwork(ctx); err != nil {
		return "", err
	}
	say("network: namespaces %s (the bridge, on %s) and kb-%s-<node>", c.Hub(), c.HubAddress(), c.Name)
	if err := c.StartLoadBalancer(ctx, listeners.files); err != nil {
		return "", err
	}
	say("load balancer on %s, and on %s for this host", c.Endpoint(), endpoint)
	for _, p := range c.PortMappings {
		say("127.0.0.1:%d forwards to NodePort %d of the nodes", p.HostPort, p.NodePort)
	}
	return endpoint, nil
}

// bootAll boots every node's machine at once.
func (l Lab) bootAll(ctx context.Context) error {
	// Whether the machines make /run/systemd (systemd-nspawn keeps its
	// locks there), which Down then removes once empty: one that was
	// there before is the host's.
	if !exists(runSystemdDir) {
		if err := os.WriteFile(l.Cluster.runSystemdMarker(), nil, 0o600); err != nil {
			return err
		}
	}
	errs := make([]error, len(l.Cluster.Nodes))
	var boots sync.WaitGroup
	for i := range l.Cluster.Nodes {
		boots.Go(func() { errs[i] = l.machine(i).Boot(ctx) })
	}
	boots.Wait()
	return errors.Join(errs...)
}

// nodeFile is what a node is given before its first boot.
type nodeFile struct {
	// kubeboot is its file at bootstrap.ConfigPath; kubeadm, for a
	// node that the real kubeadm brings up, kubeadm's configuration at
	// kubeadmConfig instead (a first node's kubeboot file then names the
	// images, and installs the pod network from podNetworkConfig).
	kubeboot, kubeadm []byte
}

// fleetDir is where the lab keeps its fleet's files and secrets, as
// `kubeboot config fleet --out` writes a user's.
func (l Lab) fleetDir() string { return filepath.Join(l.Cluster.Dir, "fleet") }

// fleet is the lab as a fleet description: the nodes that kubeboot
// brings up, with the lab's settings (its endpoint, pod subnet, knobs and
// the machines' kubelet settings) and each control-plane node's patch.
func (l Lab) fleet() (*fleet.Description, error) {
	c := l.Cluster
	cluster := map[string]any{
		"clusterName":          c.Name,
		"controlPlaneEndpoint": c.Endpoint().String(),
		"networking":           c.networking(),
		"kubelet":              map[string]any{"extraConfig": c.withFeatureGates(machineKubelet), "installCommand": kubeletInstall},
		"addons":               map[string]any{"kubeProxy": map[string]any{"extraConfig": c.withFeatureGates(labKubeProxy)}},
	}
	c.setComponentArgs(cluster)
	if c.KubernetesVersion != "" {
		cluster["kubernetesVersion"] = c.KubernetesVersion
	}
	patch, err := c.controlPlanePatch()
	if err != nil {
		return nil, err
	}
	d := &fleet.Description{APIVersion: fleet.APIVersion, Kind: fleet.Kind, Cluster: cluster,
		Worker: map[string]any{"kubelet": map[string]any{"extraConfig": c.withFeatureGates(machineKubelet)}}}
	for i, n := range c.Nodes {
		if n.Join == JoinKubeadm {
			continue // kubeadm's file, not kubeboot's
		}
		node := fleet.Node{Name: n.Name, Role: n.Role, Address: c.Address(i).String()}
		if a, ok := c.Address6(i); ok {
			node.SecondaryAddress = a.String()
		}
		if n.Role == RoleControlPlane {
			node.Patch = patch
		}
		d.Nodes = append(d.Nodes, node)
	}
	return d, nil
}

// nodeFiles renders every node's file with the fleet's code (fleet.Plan,
// as `kubeboot config fleet`): the first control-plane node's
// ClusterConfiguration carrying the CA, the others' JoinConfiguration, the
// workers' WorkerConfiguration or kubeadm's JoinConfiguration, all with
// one fresh token and certificate key, pinning the CA. The plan writes
// the fleet's secrets in the lab's dir once the lab is set up.
func (l Lab) nodeFiles() ([]nodeFile, *fleet.Plan, error) {
	c := l.Cluster
	d, err := l.fleet()
	if err != nil {
		return nil, nil, err
	}
	plan, err := fleet.NewPlan(d, l.fleetDir())
	var invalid *fleet.InvalidNodesError
	if errors.As(err, &invalid) {
		var errs []error
		for _, p := range invalid.Problems {
			errs = append(errs, fmt.Errorf("%s: clusterConfigurationPatch, featureGates or runtimeConfig: node %s's configuration would be refused: %s", c.source, p.Node, p.Problem))
		}
		return nil, nil, errors.Join(errs...)
	}
	if err != nil {
		return nil, nil, err
	}
	files := make([]nodeFile, len(c.Nodes))
	for i, n := range c.Nodes {
		files[i].kubeboot = plan.Nodes[n.Name]
		switch {
		case n.Init == JoinKubeadm:
			if files[i].kubeadm, err = l.kubeadmInit(plan.Token); err != nil {
				return nil, nil, err
			}
		case n.Join == JoinKubeadm:
			if files[i].kubeadm, err = yaml.Marshal(map[string]any{
				"apiVersion": "kubeadm.k8s.io/v1beta4",
				"kind":       "JoinConfiguration",
				"discovery": map[string]any{"bootstrapToken": map[string]any{
					"apiServerEndpoint": c.Endpoint().String(), "token": plan.Token, "caCertHashes": []string{plan.CACertHash}}},
				"nodeRegistration": c.kubeadmRegistration(i),
			}); err != nil {
				return nil, nil, err
			}
		}
	}
	return files, plan, nil
}

// kubeadmIgnored are the preflight checks kubeadm fails on a lab machine:
// this host's cgroups are v1 and it may have swap (the kubelet's
// configuration accepts both), and a node's network namespace has no
// bridge netfilter setting of its own.
var kubeadmIgnored = []string{"SystemVerification", "Swap", "FileContent--proc-sys-net-bridge-bridge-nf-call-iptables"}

// kubeadmInit is the configuration of the real `kubeadm init` on the
// lab's first node, the same cluster as its kubeboot file's: kubeadm's
// InitConfiguration, ClusterConfiguration, KubeletConfiguration and
// KubeProxyConfiguration. The keys are ECDSA P-256, kubeboot's default;
// kube-proxy runs in nftables mode, whose nft the lab's image holds.
func (l Lab) kubeadmInit(token string) ([]byte, error) {
	c := l.Cluster
	version := c.KubernetesVersion
	if version == "" {
		version = config.DefaultKubernetesVersion
	}
	registration := c.kubeadmRegistration(0)
	if !c.hasWorkers() {
		registration["taints"] = []string{}
	}
	kubelet := map[string]any{"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration"}
	maps.Copy(kubelet, c.withFeatureGates(machineKubelet))
	proxy := map[string]any{"apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration", "mode": "nftables"}
	maps.Copy(proxy, c.withFeatureGates(labKubeProxy))
	cluster := map[string]any{
		"apiVersion":           "kubeadm.k8s.io/v1beta4",
		"kind":                 "ClusterConfiguration",
		"clusterName":          c.Name,
		"kubernetesVersion":    version,
		"controlPlaneEndpoint": c.Endpoint().String(),
		"encryptionAlgorithm":  "ECDSA-P256",
		"networking":           c.networking(),
	}
	c.setComponentArgs(cluster)
	docs := []map[string]any{{
		"apiVersion":       "kubeadm.k8s.io/v1beta4",
		"kind":             "InitConfiguration",
		"bootstrapTokens":  []any{map[string]any{"token": token}},
		"localAPIEndpoint": map[string]any{"advertiseAddress": c.Address(0).String(), "bindPort": apiServerPort},
		"nodeRegistration": registration,
	}, cluster, kubelet, proxy}
	var out []byte
	for i, d := range docs {
		data, err := yaml.Marshal(d)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			out = append(out, "---\n"...)
		}
		out = append(out, data...)
	}
	return out, nil
}

// networking is the cluster's address ranges, in kubeboot's and kubeadm's
// configuration alike: the pod subnet and, when set, the Service range.
func (c *Cluster) networking() map[string]any {
	n := map[string]any{"podSubnet": c.PodSubnet}
	if c.ServiceSubnet != "" {
		n["serviceSubnet"] = c.ServiceSubnet
	}
	return n
}

// kubeadmRegistration is kubeadm's nodeRegistration of the i-th node: its
// name, the preflight checks a lab machine fails, and in a dual-stack lab
// both of its addresses for the kubelet's --node-ip.
func (c *Cluster) kubeadmRegistration(i int) map[string]any {
	r := map[string]any{"name": c.Nodes[i].Name, "ignorePreflightErrors": kubeadmIgnored}
	if a, ok := c.Address6(i); ok {
		r["kubeletExtraArgs"] = []any{map[string]any{"name": "node-ip", "value": c.Address(i).String() + "," + a.String()}}
	}
	return r
}

// install writes what the nodes share (their packages' layer and the
// images' preloaded store), the fleet's secrets in the lab's dir, and every
// node's disk with its file.
func (l Lab) install(ctx context.Context, files []nodeFile, plan *fleet.Plan) error {
	c := l.Cluster
	if _, err := plan.Write(); err != nil {
		return err
	}
	// With another kubernetesVersion than kubeboot's default, the images
	// of the default too, which an upgrade moves to, as a node image
	// holds them.
	configs := [][]byte{files[0].kubeboot}
	if v := c.KubernetesVersion; v != "" {
		configs = append(configs, bytes.ReplaceAll(files[0].kubeboot, []byte("kubernetesVersion: "+v+"\n"), nil))
	}
	refs := append([]string{SandboxImage, AgnhostImage, LocalPathProvisionerImage, BusyboxImage}, c.Images...)
	store, err := l.installShared(ctx, configs, refs, nil)
	if err != nil {
		return err
	}
	for i := range c.Nodes {
		m := l.machine(i)
		if err := installFile(m, files[i]); err != nil {
			return err
		}
		if err := preloadNode(store, m.Root()); err != nil {
			return err
		}
	}
	return nil
}

// installFile installs a node with its file, kubeboot's or kubeadm's.
func installFile(m machine.Machine, f nodeFile) error {
	if f.kubeadm == nil {
		if err := InstallNode(m, f.kubeboot); err != nil {
			return fmt.Errorf("node %s: %w", m.Name, err)
		}
		return nil
	}
	if err := InstallNode(m, nil); err != nil {
		return fmt.Errorf("node %s: %w", m.Name, err)
	}
	path := filepath.Join(m.Root(), kubeadmConfig)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, f.kubeadm, 0o600); err != nil {
		return err
	}
	if f.kubeboot == nil {
		return nil
	}
	// The node kubeadm inits gets its pod network from kubeboot, as a
	// kubeadm user installs one after init (runKubeadm).
	return os.WriteFile(filepath.Join(m.Root(), podNetworkConfig), f.kubeboot, 0o600)
}

// kubeadmConfig is where a kubeadm node's configuration lies on its disk.
const kubeadmConfig = "etc/kubernetes/kubeadm.yaml"

// podNetworkConfig is where the node that kubeadm inits holds the
// cluster's kubeboot configuration, whose addon/cni phase installs the
// pod network once kubeadm init returned.
const podNetworkConfig = "etc/kubernetes/kubeboot-pod-network.yaml"

// installKubelet makes the layer of the kubelet of the cluster's release
// when the bin dir has it apart, in v<major>.<minor>/ (the nodes are
// installed with the release they run); the bin dir's own otherwise.
func (l Lab) installKubelet() error {
	dir := minorDir(l.Cluster.KubernetesVersion)
	if dir == "" {
		return nil
	}
	src := filepath.Join(l.BinDir, dir, "kubelet")
	if _, err := os.Stat(src); err != nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(l.kubeletLayer(), "bin"), 0o755); err != nil {
		return err
	}
	return linkOrCopy(src, filepath.Join(l.kubeletLayer(), "bin", "kubelet"))
}

// stagedKubelets is where every machine node finds the kubelet of each
// release the bin dir holds, in <minor>/kubelet (v1.36/kubelet), as a
// package repository would serve it: what the lab's
// kubelet.installCommand installs (kubeletInstall).
const stagedKubelets = "/usr/lib/kubeboot-lab/kubelet"

// kubeletInstall is the lab's kubelet.installCommand: the staged kubelet
// of KUBERNETES_VERSION's minor installed over /usr/bin/kubelet, as the
// node's package manager would.
var kubeletInstall = []string{"/bin/sh", "-c", "install -m 0755 " + stagedKubelets + "/${KUBERNETES_VERSION%.*}/kubelet /usr/bin/kubelet.new && mv /usr/bin/kubelet.new /usr/bin/kubelet"}

// stageKubelets puts, in the nodes' /usr layer, the bin dir's own kubelet
// (of kubeboot's default release) and the kubelet of each other release
// it holds in v<major>.<minor>/, under stagedKubelets.
func (l Lab) stageKubelets() error {
	kubelets := map[string]string{minorDir(config.DefaultKubernetesVersion): filepath.Join(l.BinDir, "kubelet")}
	others, err := filepath.Glob(filepath.Join(l.BinDir, "v1.*", "kubelet"))
	if err != nil {
		return err
	}
	for _, path := range others {
		kubelets[filepath.Base(filepath.Dir(path))] = path
	}
	for minor, src := range kubelets {
		dir := filepath.Join(l.usrLayer(), strings.TrimPrefix(stagedKubelets, "/usr/"), minor)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := linkOrCopy(src, filepath.Join(dir, "kubelet")); err != nil {
			return fmt.Errorf("stage the kubelet %s: %w", src, err)
		}
	}
	return nil
}

// installShared writes what the nodes share: their packages' layer,
// kubeboot's package, the kubelet of the cluster's release and the staged
// kubelets of every release, and the
// store of the images configs name (`kubeboot images list`), refs and
// extra, preloaded into containerd (preloaded). It returns the store.
func (l Lab) installShared(ctx context.Context, configs [][]byte, refs []string, extra []Image) (string, error) {
	if _, err := UsrLayer(l.Cluster.Dir, l.BinDir); err != nil {
		return "", err
	}
	if err := linkOrCopy(l.Package, l.packageFile()); err != nil {
		return "", fmt.Errorf("kubeboot's package: %w", err)
	}
	if err := l.installKubelet(); err != nil {
		return "", err
	}
	if err := l.stageKubelets(); err != nil {
		return "", err
	}
	return l.images(ctx, configs, refs, extra)
}

// images returns the preloaded store of the images configs name
// (`kubeboot images list`), refs and extra, cached in the bin dir.
func (l Lab) images(ctx context.Context, configs [][]byte, refs []string, extra []Image) (string, error) {
	refs = slices.Clone(refs)
	for i, cfg := range configs {
		path := filepath.Join(l.Cluster.Dir, fmt.Sprintf("images-%d.yaml", i))
		if err := os.WriteFile(path, cfg, 0o600); err != nil {
			return "", err
		}
		var stderr strings.Builder
		cmd := exec.CommandContext(ctx, l.Kubeboot, "images", "list", "--config", path)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("images list: %w: %s", err, strings.TrimSpace(stderr.String()))
		}
		refs = append(refs, strings.Fields(string(out))...)
	}
	slices.Sort(refs)
	var images []Image
	for _, ref := range slices.Compact(refs) {
		img, err := ResolveImage(l.BinDir, ref)
		if err != nil {
			return "", err
		}
		images = append(images, img)
	}
	return preloaded(ctx, l.BinDir, l.Kubeboot, filepath.Join(l.BinDir, ".lab-images"), append(images, extra...))
}

// waitNodes waits until every node is up: its bootstrap unit done, or for
// a kubeadm worker, `kubeadm join` run in it once the first control-plane
// node is up, which closes firstUp. It follows each bootstrap unit's
// journal, sending its JSON events on.
func (l Lab) waitNodes(ctx context.Context, files []nodeFile, start time.Time, events chan<- Event, firstUp chan struct{}) ([]ResultNode, error) {
	c := l.Cluster
	ctx, cancel := context.WithTimeout(ctx, bootTimeout)
	defer cancel()
	nodes := make([]ResultNode, len(c.Nodes))
	errs := make([]error, len(c.Nodes))
	var wg sync.WaitGroup
	for i, n := range c.Nodes {
		nodes[i] = ResultNode{Name: n.Name, Role: n.Role, Join: n.Join, Address: c.Address(i).String()}
		m := l.machine(i)
		wg.Go(func() {
			switch {
			case i == 0 && files[i].kubeadm != nil:
				errs[i] = runKubeadm(ctx, m, "init", events)
			case files[i].kubeadm != nil:
				select {
				case <-firstUp:
					errs[i] = runKubeadm(ctx, m, "join", events)
				case <-ctx.Done():
					errs[i] = ctx.Err()
				}
			default:
				errs[i] = followBootstrap(ctx, m, events)
			}
			if i == 0 && errs[i] == nil {
				close(firstUp)
			}
			if errs[i] != nil {
				errs[i] = fmt.Errorf("node %s: %w", n.Name, errs[i])
				cancel()
				return
			}
			nodes[i].Took = time.Since(start).Round(time.Millisecond).String()
			events <- Event{Node: n.Name, Phase: "lab", Level: "info", Msg: "up in " + nodes[i].Took}
		})
	}
	wg.Wait()
	// The first error is the cause; the others were cancelled by it.
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return nodes, err
		}
	}
	return nodes, errors.Join(errs...)
}

// followBootstrap sends the events of the machine's bootstrap unit on,
// read from its journal, until the unit's result says it converged; it
// fails when the unit failed.
func followBootstrap(ctx context.Context, m machine.Machine, events chan<- Event) error {
	follow, cancel := context.WithCancel(ctx)
	defer cancel()
	journal, err := m.Command(follow, "journalctl", "--follow", "--output=cat", "--no-tail", "--unit=kubeboot-bootstrap")
	if err != nil {
		return err
	}
	stdout, err := journal.StdoutPipe()
	if err != nil {
		return err
	}
	if err := journal.Start(); err != nil {
		return err
	}
	converged := make(chan struct{})
	var read sync.WaitGroup
	read.Go(func() { forwardEvents(stdout, m.Name, events, converged) })
	defer func() {
		cancel()
		_ = journal.Wait()
		read.Wait()
	}()
	failed := ""
	err = wait.PollUntilContextCancel(ctx, time.Second, false, func(ctx context.Context) (bool, error) {
		select {
		case <-converged:
			return true, nil
		default:
		}
		// The bootstrap unit starts once the package is installed.
		for _, unit := range []string{installUnit, "kubeboot-bootstrap"} {
			out, _ := m.Output(ctx, "systemctl", "is-failed", unit)
			if strings.TrimSpace(string(out)) == "failed" {
				failed = unit
				return true, nil
			}
		}
		return false, nil
	})
	switch {
	case err != nil:
		return fmt.Errorf("kubeboot-bootstrap.service has not converged: %w", err)
	case failed != "":
		return fmt.Errorf("%s.service failed: `kubeboot lab exec %s -- journalctl -u %s` says why", failed, m.Name, failed)
	}
	return nil
}

// forwardEvents sends each JSON event of r (a bootstrap unit's journal)
// on as the node's, and closes converged at a result that says the run
// succeeded; other lines are not progress.
func forwardEvents(r io.Reader, node string, events chan<- Event, converged chan<- struct{}) {
	lines := bufio.NewScanner(r)
	lines.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for lines.Scan() {
		var e struct {
			Phase, Level, Msg string
			Result            *struct{ OK bool }
		}
		switch {
		case json.Unmarshal(lines.Bytes(), &e) != nil:
		case e.Result != nil && e.Result.OK:
			close(converged)
			return
		case e.Msg != "":
			events <- Event{Node: node, Phase: e.Phase, Level: e.Level, Msg: e.Msg}
		}
	}
}

// runKubeadm runs the real `kubeadm init` or `kubeadm join` in the
// machine with its configuration, once it is installed (waitInstalled), as
// an operator would, and after init installs kubeboot's pod network
// (`kubeboot init phase addon cni`), as an operator installs one. It sends
// an event of the node's kubeadm phase when kubeadm starts and when it
// has returned, which time it (make bench).
func runKubeadm(ctx context.Context, m machine.Machine, verb string, events chan<- Event) error {
	if err := waitInstalled(ctx, m); err != nil {
		return err
	}
	say := func(msg string) { events <- Event{Node: m.Name, Phase: "kubeadm", Level: "info", Msg: msg} }
	say("kubeadm " + verb + " --config /" + kubeadmConfig)
	if out, err := m.Output(ctx, "kubeadm", verb, "--config", "/"+kubeadmConfig); err != nil {
		return fmt.Errorf("kubeadm %s: %w: %s", verb, err, output.LastLines(string(out), 20))
	}
	say("kubeadm " + verb + " returned")
	if verb != "init" {
		return nil
	}
	if out, err := m.Output(ctx, "kubeboot", "init", "phase", "addon", "cni", "--config", "/"+podNetworkConfig); err != nil {
		return fmt.Errorf("install the pod network: kubeboot init phase addon cni: %w: %s", err, output.LastLines(string(out), 20))
	}
	say("kubeboot's pod network installed")
	return nil
}

// waitInstalled waits until the machine has installed kubeboot's
// package and its containerd, with the lab's images preloaded, is active:
// what a caller of Boot runs in a node needs both. A failed install is
// reported at once.
func waitInstalled(ctx context.Context, m machine.Machine) error {
	installed := false
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		out, _ := m.Output(ctx, "systemctl", "is-active", installUnit)
		switch strings.TrimSpace(string(out)) {
		case "failed":
			return false, fmt.Errorf("%s.service failed: `kubeboot lab exec %s -- journalctl -u %s` says why", installUnit, m.Name, installUnit)
		case "active":
			installed = true
		}
		out, _ = m.Output(ctx, "systemctl", "is-active", "containerd")
		return installed && strings.TrimSpace(string(out)) == "active", nil
	})
	switch {
	case err != nil && !installed:
		return fmt.Errorf("kubeboot's package was not installed: %w", err)
	case err != nil:
		return fmt.Errorf("containerd never became active: %w", err)
	}
	return nil
}

// kubectl runs kubectl in the machine with its admin.conf.
func kubectl(ctx context.Context, m machine.Machine, args ...string) ([]byte, error) {
	out, err := m.Output(ctx, append([]string{"kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf"}, args...)...)
	if err != nil {
		return out, fmt.Errorf("node %s: kubectl %s: %w: %s", m.Name, strings.Join(args, " "), err, output.LastLines(string(out), 10))
	}
	return out, nil
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

// Down removes the lab: every machine, all at once (its processes,
// cgroups, mounts and disk), the load balancer, the network and the lab's
// directory. A lab that is partly up, or already down, comes down as far
// as it is up. The machines are killed, not shut down: their disks go
// with them, so nothing a shutdown would save is kept, as kind's nodes
// are removed. It refuses, removing nothing, a lab of its name that is
// registered from another directory: another description's.
func (l Lab) Down(ctx context.Context) error {
	c := l.Cluster
	if err := l.checkOwn(); err != nil {
		return err
	}
	errs := make([]error, len(c.Nodes))
	var wg sync.WaitGroup
	for i := range c.Nodes {
		wg.Go(func() {
			if err := l.machine(i).Remove(0); err != nil {
				errs[i] = fmt.Errorf("node %s: %w", c.Nodes[i].Name, err)
			}
		})
	}
	wg.Wait()
	if err := c.LoadBalancer().Stop(10 * time.Second); err != nil {
		errs = append(errs, err)
	}
	madeNetnsDir := exists(c.netnsDirMarker())
	if err := c.TearDownNetwork(ctx); err != nil {
		errs = append(errs, err)
	}
	if madeNetnsDir && exists(netnsDir) {
		errs = append(errs, l.handOver(netnsDirMarkerName))
	}
	if exists(c.runSystemdMarker()) {
		// Empty once the host's last machine is gone: machine.Remove
		// removes what systemd-nspawn kept in it.
		if err := os.Remove(runSystemdDir); err != nil && exists(runSystemdDir) {
			errs = append(errs, l.handOver(runSystemdMarkerName))
		}
		if err := os.Remove(c.runSystemdMarker()); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		return err
	}
	if l.Registry == "" {
		return nil
	}
	return l.unregister()
}

// checkOwn refuses a lab of this name that the registry holds with
// another directory: the lab that is up under this name is another
// description's, which only that description brings down.
func (l Lab) checkOwn() error {
	if l.Registry == "" {
		return nil
	}
	labs, err := List(l.Registry)
	if err != nil {
		return err
	}
	c := l.Cluster
	for _, o := range labs {
		if o.Name == c.Name && filepath.Clean(o.Dir) != filepath.Clean(c.Dir) {
			return fmt.Errorf("%s: the lab %s that is up is another description's (%s, dir %s), not this one's (dir %s): nothing was brought down; bring it down with `kubeboot lab down --cluster %s`",
				c.source, o.Name, o.Description, o.Dir, c.Dir, o.Description)
		}
	}
	return nil
}

// runSystemdDir is where systemd-nspawn keeps, on the host, its locks and
// mount propagation dirs (package machine removes them with the host's
// last machine).
const runSystemdDir = "/run/systemd"

// runSystemdMarkerName is the file in the lab's dir that exists while the
// lab is up if the lab made runSystemdDir.
const runSystemdMarkerName = "made-run-systemd"

func (c *Cluster) runSystemdMarker() string { return filepath.Join(c.Dir, runSystemdMarkerName) }

// handOver passes the removal of a directory of /run this lab made (the
// marker of that name in its dir says which), which another lab's
// machines keep from being removed now, to a lab that is up, whose Down
// removes it once empty.
func (l Lab) handOver(marker string) error {
	if l.Registry == "" {
		return nil
	}
	others, err := List(l.Registry)
	if err != nil {
		return err
	}
	for _, o := range others {
		if o.Name != l.Cluster.Name {
			return os.WriteFile(filepath.Join(o.Dir, marker), nil, 0o600)
		}
	}
	return nil
}

// exists says whether path exists.
func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
