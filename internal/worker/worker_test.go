package worker

import (
	"errors"
	"maps"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
	"github.com/kubeboot/kubeboot/templates"
)

// TestWorkerPhasesWriteWhatTheKubeletNeeds runs the phases before the
// kubelet starts: its configuration is the cluster's with this node's
// settings, its bootstrap kubeconfig holds the CA, the server and the
// token, and a re-run writes nothing.
func TestWorkerPhasesWriteWhatTheKubeletNeeds(t *testing.T) {
	n := newWorker(t, kubeletConfigMap(t))
	must(t, runPhases(t, n, Preflight, KubeletConfig, BootstrapKubeconfig))

	var kc map[string]any
	must(t, yaml.Unmarshal(phasestest.HostFile(t, n.s, n.w.Kubelet.ConfigFile), &kc))
	for key, want := range map[string]any{
		"kind":                     "KubeletConfiguration",
		"staticPodPath":            "/etc/kubernetes/manifests",
		"containerRuntimeEndpoint": config.DefaultCRIEndpoint,
		"serverTLSBootstrap":       true,
		"rotateCertificates":       true,
		"failSwapOn":               false, // the cluster's
		"clusterDomain":            "cluster.local",
		"address":                  "127.0.0.1", // this node's extraConfig
		"podLogsDir":               nil,         // the init node's own stays out
		"tlsCertFile":              nil,
	} {
		if got := kc[key]; !cmp.Equal(got, want) {
			t.Errorf("kubelet config %s = %v, want %v", key, got, want)
		}
	}
	authn := kc["authentication"].(map[string]any)
	if got := authn["x509"].(map[string]any)["clientCAFile"]; got != "/etc/kubernetes/pki/ca.crt" {
		t.Errorf("clientCAFile = %v", got)
	}
	if authn["webhook"].(map[string]any)["enabled"] != true {
		t.Errorf("the cluster's webhook authentication is lost: %v", authn)
	}

	path := n.w.KubeconfigPath(config.KubeconfigBootstrapKubelet)
	bootstrap, err := clientcmd.Load(phasestest.HostFile(t, n.s, path))
	must(t, err)
	current := bootstrap.Contexts[bootstrap.CurrentContext]
	if cluster := bootstrap.Clusters[current.Cluster]; cluster.Server != "https://10.0.0.10:6443" || string(cluster.CertificateAuthorityData) != string(n.ca.Cert) {
		t.Errorf("bootstrap-kubelet.conf's cluster: %+v", cluster)
	}
	if bootstrap.AuthInfos[current.AuthInfo].Token != workerToken.Value() {
		t.Error("bootstrap-kubelet.conf does not hold the token")
	}
	for file, mode := range map[string]os.FileMode{path: 0o600, n.w.CAPath(): 0o644, n.w.Kubelet.ConfigFile: 0o600, n.w.Paths.ManifestsDir: 0o700} {
		if info, err := os.Stat(n.host(file)); err != nil || info.Mode().Perm() != mode {
			t.Errorf("%s: %v, want mode %o", file, err, mode)
		}
	}
	if string(phasestest.HostFile(t, n.s, n.w.CAPath())) != string(n.ca.Cert) {
		t.Error("ca.crt is not the cluster CA")
	}

	// A re-run changes no file.
	before := phasestest.Snapshot(t, n.host("/"))
	must(t, runPhases(t, n, Preflight, KubeletConfig, BootstrapKubeconfig))
	if after := phasestest.Snapshot(t, n.host("/")); !maps.Equal(before, after) {
		t.Error("a re-run changed files")
	}
	if strings.Contains(n.out.String(), workerToken.Secret) {
		t.Errorf("the progress holds the token's secret:\n%s", n.out)
	}
}

func TestWorkerPreflight(t *testing.T) {
	other := newTestCA(t)
	refuse := func(err error) func(k8stesting.Action) (bool, runtime.Object, error) {
		return func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, err }
	}
	tests := []struct {
		name    string
		prepare func(t *testing.T, n *workerNode)
		failed  string // the failing check; "" when the preflight passes
		want    string // in the output
	}{
		{"a new node", nil, "", `"all checks passed"`},
		{"a Ready Node of this name", func(_ *testing.T, n *workerNode) {
			must(t, n.client.Tracker().Add(nodeObject(true)))
		}, "NodeName", "a Node worker1 is Ready in the cluster, and this node holds no credential of it: another machine has this name"},
		{"a Node of this name that is not Ready", func(_ *testing.T, n *workerNode) {
			must(t, n.client.Tracker().Add(nodeObject(false)))
		}, "", "a Node worker1 exists and is not Ready: this node's kubelet takes it over"},
		{"a token that may not get Nodes", func(_ *testing.T, n *workerNode) {
			n.client.PrependReactor("get", "nodes", refuse(apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "worker1", errors.New("RBAC"))))
		}, "NodeName", "grants bootstrap tokens kubeadm:get-nodes"},
		{"an API server that fails", func(_ *testing.T, n *workerNode) {
			n.client.PrependReactor("get", "nodes", refuse(apierrors.NewServiceUnavailable("etcd is down")))
		}, "NodeName", `get Node \"worker1\": etcd is down`},
		{"the kubelet.conf of another cluster", func(t *testing.T, n *workerNode) { n.writeKubeletConf(t, other, "worker1") }, "KubeletConf", "belongs to another cluster"},
		{"the kubelet.conf of another node", func(t *testing.T, n *workerNode) { n.writeKubeletConf(t, n.ca, "worker2") }, "KubeletConf", "is the kubelet's credential as node worker2, not worker1"},
		{"the CA of another cluster", func(t *testing.T, n *workerNode) { mustWrite(t, n.host(n.w.CAPath()), other.Cert, 0o644) }, "ClusterCA", "holds another CA than the cluster's"},
		{"the kubelet's port taken", func(t *testing.T, n *workerNode) { listen(t, n) }, "Port-", "where the kubelet listens, is in use by pid " + strconv.Itoa(os.Getpid())},
		// A re-run on a joined node: its kubelet listens, its Node is Ready.
		{"this node, joined", func(t *testing.T, n *workerNode) {
			n.writeKubeletConf(t, n.ca, "worker1")
			must(t, n.client.Tracker().Add(nodeObject(true)))
			listen(t, n)
		}, "", "Node worker1 exists, and this node's kubelet.conf is its credential (a re-run)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newWorker(t)
			if tt.prepare != nil {
				tt.prepare(t, n)
			}
			err := runPhases(t, n, Preflight)
			switch {
			case tt.failed == "" && err != nil:
				t.Fatalf("preflight: %v\n%s", err, n.out)
			case tt.failed != "" && (err == nil || !strings.Contains(err.Error(), "preflight check(s) failed: "+tt.failed)):
				t.Fatalf("preflight: %v, want %s to fail\n%s", err, tt.failed, n.out)
			}
			if !strings.Contains(n.out.String(), tt.want) {
				t.Errorf("output lacks %q:\n%s", tt.want, n.out)
			}
		})
	}
}

// listen takes the kubelet's address of n until the test ends.
func listen(t *testing.T, n *workerNode) {
	t.Helper()
	host, port := phases.KubeletAddress(n.w.Kubelet.ExtraConfig)
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	must(t, err)
	t.Cleanup(func() { _ = l.Close() })
}

func TestWorkerKubeletConfigNeedsUploadConfig(t *testing.T) {
	n := newWorker(t)
	err := runPhases(t, n, KubeletConfig)
	if err == nil || !strings.Contains(err.Error(), `get ConfigMap "kube-system/kubelet-config": not found: run `+"`kubeboot init phase upload-config`") {
		t.Fatalf("got %v", err)
	}
	if _, err := os.Stat(n.host(n.w.Kubelet.ConfigFile)); !os.IsNotExist(err) {
		t.Errorf("a failed kubelet-config wrote %s", n.w.Kubelet.ConfigFile)
	}
}

// TestBootstrapKubeconfigOnAJoinedNode: the kubelet holds its own client
// certificate, so no bootstrap credential is written again.
func TestBootstrapKubeconfigOnAJoinedNode(t *testing.T) {
	n := newWorker(t)
	n.writeKubeletConf(t, n.ca, "worker1")
	must(t, runPhases(t, n, BootstrapKubeconfig))
	if _, err := os.Stat(n.host(n.w.KubeconfigPath(config.KubeconfigBootstrapKubelet))); !os.IsNotExist(err) {
		t.Error("bootstrap-kubelet.conf written on a joined node")
	}
	if !strings.Contains(n.out.String(), "holds this node's client certificate of the cluster") {
		t.Errorf("output:\n%s", n.out)
	}
	// A CA of another cluster is refused before anything is written.
	n = newWorker(t)
	mustWrite(t, n.host(n.w.CAPath()), newTestCA(t).Cert, 0o644)
	if err := runPhases(t, n, BootstrapKubeconfig); err == nil || !strings.Contains(err.Error(), "holds another CA") {
		t.Fatalf("got %v", err)
	}
	if _, err := os.Stat(n.host(n.w.KubeconfigPath(config.KubeconfigBootstrapKubelet))); !os.IsNotExist(err) {
		t.Error("bootstrap-kubelet.conf written beside another cluster's CA")
	}
}

func TestKubeletArgs(t *testing.T) {
	n := newWorker(t)
	want := []string{"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf", "--kubeconfig=/etc/kubernetes/kubelet.conf",
		"--config=/var/lib/kubelet/config.yaml", "--hostname-override=worker1"}
	if diff := cmp.Diff(want, kubeletArgs(n.w)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	n.w.Node.Address = "10.0.0.21"
	if got := kubeletArgs(n.w); got[len(got)-1] != "--node-ip=10.0.0.21" {
		t.Errorf("with node.address: %v", got)
	}
	// A dual-stack node gives the kubelet both of its addresses.
	n.w.Node.SecondaryAddress = "fd00:89::21"
	if got := kubeletArgs(n.w); got[len(got)-1] != "--node-ip=10.0.0.21,fd00:89::21" {
		t.Errorf("with node.secondaryAddress: %v", got)
	}
	// node.labels are the kubelet's --node-labels, in a stable order.
	n.w.Node.Labels = map[string]string{"tier": "db", "example.com/pool": "gpu", "node.kubernetes.io/exclude-from-external-load-balancers": ""}
	if got := kubeletArgs(n.w); got[len(got)-1] != "--node-labels=example.com/pool=gpu,node.kubernetes.io/exclude-from-external-load-balancers=,tier=db" {
		t.Errorf("with node.labels: %v", got)
	}
}

// TestWorkerKubeletConfigRegistersTaints: node.taints become the kubelet's
// registerWithTaints, over the cluster's, so that the Node has them from
// its registration; a re-run writes nothing, and a node without taints
// keeps the cluster's configuration as it was.
func TestWorkerKubeletConfigRegistersTaints(t *testing.T) {
	cm := kubeletConfigMap(t)
	var cluster map[string]any
	must(t, yaml.Unmarshal([]byte(cm.Data[templates.KubeletConfigKey]), &cluster))
	cluster["registerWithTaints"] = []any{map[string]any{"key": "from-the-cluster", "effect": "NoSchedule"}}
	data, err := yaml.Marshal(cluster)
	must(t, err)
	cm.Data[templates.KubeletConfigKey] = string(data)

	n := newWorker(t, cm)
	n.w.Node.Taints = []config.NodeTaint{
		{Key: "example.com/dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule},
		{Key: "spot", Effect: corev1.TaintEffectPreferNoSchedule},
	}
	must(t, runPhases(t, n, KubeletConfig))
	var kc map[string]any
	must(t, yaml.Unmarshal(phasestest.HostFile(t, n.s, n.w.Kubelet.ConfigFile), &kc))
	want := []any{
		map[string]any{"key": "example.com/dedicated", "value": "gpu", "effect": "NoSchedule"},
		map[string]any{"key": "spot", "effect": "PreferNoSchedule"},
	}
	if diff := cmp.Diff(want, kc["registerWithTaints"]); diff != "" {
		t.Errorf("registerWithTaints (-want +got):\n%s", diff)
	}

	// A re-run changes no file.
	before := phasestest.Snapshot(t, n.host("/"))
	must(t, runPhases(t, n, KubeletConfig))
	if after := phasestest.Snapshot(t, n.host("/")); !maps.Equal(before, after) {
		t.Error("a re-run changed files")
	}

	// Without node.taints, the cluster's stay.
	n = newWorker(t, cm)
	must(t, runPhases(t, n, KubeletConfig))
	kc = nil
	must(t, yaml.Unmarshal(phasestest.HostFile(t, n.s, n.w.Kubelet.ConfigFile), &kc))
	if diff := cmp.Diff([]any{map[string]any{"key": "from-the-cluster", "effect": "NoSchedule"}}, kc["registerWithTaints"]); diff != "" {
		t.Errorf("without node.taints, registerWithTaints (-want +got):\n%s", diff)
	}
}

func TestKubeletStart(t *testing.T) {
	state := "inactive"
	sys, calls := phasestest.FakeSystemd(&state)
	kubeletStart := phases.KubeletStart(Kubelet)

	// Without systemd: the command to run, and nothing else.
	n := newWorker(t)
	n.s.System = sys
	must(t, runPhases(t, n, kubeletStart))
	if len(*calls) > 0 || len(n.s.Files.Changes().Written) > 0 {
		t.Errorf("without systemd: ran %v, wrote %v", *calls, n.s.Files.Changes().Written)
	}
	if !strings.Contains(n.out.String(), "start the kubelet yourself, as kubelet --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf --config=/var/lib/kubelet/config.yaml --hostname-override=worker1, then run `kubeboot join phase kubelet-wait-bootstrap`") {
		t.Errorf("output:\n%s", n.out)
	}

	// A kubelet that systemd does not run (the lab's) is left alone, and
	// systemd's configuration too.
	must(t, os.MkdirAll(n.host(phases.SystemdRunDir), 0o755))
	n.out.Reset()
	func() {
		host, port := phases.KubeletAddress(n.w.Kubelet.ExtraConfig)
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		must(t, err)
		defer func() { _ = l.Close() }()
		must(t, runPhases(t, n, kubeletStart))
	}()
	if diff := cmp.Diff([]string{"is-active kubelet"}, *calls); diff != "" || len(n.s.Files.Changes().Written) > 0 ||
		!strings.Contains(n.out.String(), "a kubelet that kubelet.service does not run already listens on") {
		t.Errorf("beside a running kubelet: systemctl calls (-want +got):\n%s; wrote %v\n%s", diff, n.s.Files.Changes().Written, n.out)
	}

	// With systemd: the drop-in, a reload and a restart.
	*calls = nil
	must(t, runPhases(t, n, kubeletStart))
	if diff := cmp.Diff([]string{"is-active kubelet", "daemon-reload", "restart kubelet", "is-enabled kubelet"}, *calls); diff != "" {
		t.Errorf("systemctl calls (-want +got):\n%s", diff)
	}
	dropIn := string(phasestest.HostFile(t, n.s, phases.SystemdDropIn))
	if !strings.Contains(dropIn, "\nExecStart=\nExecStart=/usr/bin/kubelet --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf ") ||
		!strings.HasPrefix(dropIn, "# Written by kubeboot join: ") {
		t.Errorf("drop-in:\n%s", dropIn)
	}

	// A re-run on an active kubelet whose files are unchanged leaves it running.
	*calls = nil
	n = newWorkerOf(t, n.ca, n.host("/"))
	n.s.System = sys
	must(t, runPhases(t, n, kubeletStart))
	if diff := cmp.Diff([]string{"is-active kubelet"}, *calls); diff != "" || len(n.s.Files.Changes().Written) > 0 {
		t.Errorf("re-run: systemctl calls (-want +got):\n%s; wrote %v", diff, n.s.Files.Changes().Written)
	}

	// A configuration written in this run restarts it.
	*calls = nil
	n = newWorkerOf(t, n.ca, n.host("/"), kubeletConfigMap(t))
	n.s.System = sys
	must(t, runPhases(t, n, KubeletConfig, kubeletStart))
	if diff := cmp.Diff([]string{"is-active kubelet", "restart kubelet", "is-enabled kubelet"}, *calls); diff != "" {
		t.Errorf("after a new kubelet config: systemctl calls (-want +got):\n%s", diff)
	}
}

// TestJoined: a worker has joined once its kubelet.conf holds a client
// certificate of its name from the CA on the node and its join ended; not
// before, not while bootstrap-kubelet.conf is there, not with another
// node's certificate, not with another cluster's CA.
func TestJoined(t *testing.T) {
	n := newWorker(t)
	if joined, err := Joined(n.s); joined || err != nil {
		t.Errorf("a new node: joined %t, %v", joined, err)
	}
	mustWrite(t, n.host(n.w.CAPath()), n.ca.Cert, 0o644)
	n.writeKubeletConf(t, n.ca, "worker1")
	if joined, err := Joined(n.s); !joined || err != nil {
		t.Errorf("a joined node: joined %t, %v", joined, err)
	}
	bootstrap := n.host(n.w.KubeconfigPath(config.KubeconfigBootstrapKubelet))
	mustWrite(t, bootstrap, []byte("a join that never saw its Node Ready"), 0o600)
	if joined, err := Joined(n.s); joined || err != nil {
		t.Errorf("a join whose wait for its Node did not end (bootstrap-kubelet.conf is there): joined %t, %v", joined, err)
	}
	must(t, os.Remove(bootstrap))
	n.writeKubeletConf(t, n.ca, "worker2")
	if joined, _ := Joined(n.s); joined {
		t.Error("another node's certificate counts as joined")
	}
	n.writeKubeletConf(t, n.ca, "worker1")
	mustWrite(t, n.host(n.w.CAPath()), newTestCA(t).Cert, 0o644)
	if joined, _ := Joined(n.s); joined {
		t.Error("a certificate of another cluster's CA counts as joined")
	}
}
