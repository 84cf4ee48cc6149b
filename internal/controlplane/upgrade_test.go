package controlplane

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/health"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/procnet"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
	"github.com/kubeboot/kubeboot/templates"
)

func TestCheckSkew(t *testing.T) {
	pod := func(image string) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Image: image}}}}
	}
	tests := []struct {
		from, to string
		wantErr  string
	}{
		{"registry.k8s.io/kube-apiserver:v1.35.4", "v1.36.3", ""},
		{"registry.k8s.io/kube-apiserver:v1.36.0", "v1.36.3", ""},
		{"localhost:5000/kube-apiserver:v1.36.3", "v1.36.1", ""},
		{"registry.k8s.io/kube-apiserver:v1.34.1", "v1.36.3", "one minor version at a time (to v1.35 first)"},
		{"registry.k8s.io/kube-apiserver:v1.36.3", "v1.35.4", "downgrades across minor versions"},
		{"registry.k8s.io/kube-apiserver:latest", "v1.36.3", "read the running version"},
	}
	for _, tt := range tests {
		err := checkSkew(pod(tt.from), tt.to)
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%s -> %s: got %v, want %q", tt.from, tt.to, err, tt.wantErr)
		}
	}
}

func TestUpgradeOne(t *testing.T) {
	for _, tt := range []struct {
		name          string
		arg           string
		ignoreChanges bool
		wantErr       string
		wantStarts    int
		wantNext      bool
	}{
		{name: "healthy new instance", arg: "--v=2", wantStarts: 2, wantNext: true},
		{name: "failing new instance is rolled back", arg: "--bogus-flag", wantErr: "rolled back", wantStarts: 2},
		// The old instance answering is no success; once the previous
		// manifest is back it is the instance that runs it.
		{name: "old instance that keeps answering is no success", arg: "--v=2", ignoreChanges: true,
			wantErr: "has not started one from the new manifest", wantStarts: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := initialised(t)
			s.Options.Offline = false
			k := &fakeKubelet{addr: freeAddr(t), ignoreChanges: tt.ignoreChanges}
			k.start(t, s)
			path := s.Config.ManifestPath(config.NameScheduler)
			prev, err := s.Files.ReadFile(path)
			must(t, err)
			next := withArg(t, prev, tt.arg)
			target := schedulerTarget(s, k.addr)
			manifests := watchManifest(t, s.Files.HostPath(path))

			err = upgradeOne(context.Background(), s, 2*time.Second, instance{data: prev, target: target}, instance{data: next, target: target})

			want := prev
			if tt.wantNext {
				want = next
			}
			if tt.wantErr == "" && err != nil {
				t.Fatal(err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "rolled back: the previous manifest is in place again and healthy")) {
				t.Fatalf("want a verified rollback after an error with %q, got %v", tt.wantErr, err)
			}
			if got, _ := s.Files.ReadFile(path); string(got) != string(want) {
				t.Errorf("manifest after the upgrade:\n%s\nwant:\n%s", got, want)
			}
			if k.started() != tt.wantStarts {
				t.Errorf("the component started %d times, want %d", k.started(), tt.wantStarts)
			}
			if missing := manifests(); missing > 0 {
				t.Errorf("the manifest was missing %d times during the upgrade", missing)
			}
			if _, err := s.Files.ReadFile(journalPath(s.Config)); err == nil {
				t.Error("the journal outlived a verified step")
			}
		})
	}
}

// An interrupted wait (Ctrl-C) is no failure: nothing is rolled back and
// the journal stays for the re-run.
func TestUpgradeOneInterrupted(t *testing.T) {
	s := initialised(t)
	s.Options.Offline = false
	k := &fakeKubelet{addr: freeAddr(t), ignoreChanges: true}
	k.start(t, s)
	path := s.Config.ManifestPath(config.NameScheduler)
	prev, err := s.Files.ReadFile(path)
	must(t, err)
	next := withArg(t, prev, "--v=2")
	target := schedulerTarget(s, k.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()

	err = upgradeOne(ctx, s, 10*time.Second, instance{data: prev, target: target}, instance{data: next, target: target})

	if err == nil || !strings.Contains(err.Error(), "interrupted") || strings.Contains(err.Error(), "rolled back") {
		t.Fatalf("want an interruption without a rollback, got %v", err)
	}
	if got, _ := s.Files.ReadFile(path); string(got) != string(next) {
		t.Error("the new manifest was taken back")
	}
	if _, err := s.Files.ReadFile(journalPath(s.Config)); err != nil {
		t.Errorf("the journal is gone: %v", err)
	}
}

func TestSamePod(t *testing.T) {
	s := initialised(t)
	prev, err := s.Files.ReadFile(s.Config.ManifestPath(config.NameScheduler))
	must(t, err)
	for _, tt := range []struct {
		name string
		next []byte
		want bool
	}{
		{"a comment", append([]byte("# rendered by an older kubeboot\n"), prev...), true},
		{"another flag", withArg(t, prev, "--v=2"), false},
	} {
		if got, err := samePod(prev, tt.next); err != nil || got != tt.want {
			t.Errorf("%s: same pod %v (%v), want %v", tt.name, got, err, tt.want)
		}
	}
}

// watchManifest polls path until the test ends; the returned function
// says how many polls found it missing.
func watchManifest(t *testing.T, path string) func() int {
	var missing atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if _, err := os.Stat(path); err != nil {
				missing.Add(1)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	stop := func() int { cancel(); <-done; return int(missing.Load()) }
	t.Cleanup(func() { stop() })
	return stop
}

// A crash in a step leaves a journal; the re-run finishes the step as the
// journal and the manifest dir tell.
func TestResumeUpgrade(t *testing.T) {
	for _, tt := range []struct {
		name      string
		arg       string // the new manifest's extra flag; "" = the crash came before the write
		rollback  bool   // the crash came during the rollback
		wantErr   string
		wantPrev  bool
		wantStart int
	}{
		{name: "crash before the write", wantPrev: true, wantStart: 1},
		{name: "crash after the write", arg: "--v=2", wantStart: 2},
		{name: "crash after writing a failing manifest", arg: "--bogus-flag", wantErr: "rolled back", wantPrev: true, wantStart: 2},
		{name: "crash during the rollback", arg: "--bogus-flag", rollback: true, wantErr: "rolled back", wantPrev: true, wantStart: 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// The stand-in scheduler listens where the manifest says.
			addr := freeAddr(t)
			_, port, _ := net.SplitHostPort(addr)
			s := initialisedWith(t, func(c *config.ClusterConfiguration) {
				c.Scheduler.ExtraArgs = append(c.Scheduler.ExtraArgs, config.Arg{Name: "secure-port", Value: port})
			})
			s.Options.Offline = false
			k := &fakeKubelet{addr: addr}
			path := s.Config.ManifestPath(config.NameScheduler)
			prev, err := s.Files.ReadFile(path)
			must(t, err)
			backup, err := backupManifest(s, config.NameScheduler+".before-upgrade", prev)
			must(t, err)
			k.start(t, s)
			j, err := newJournal(config.NameScheduler, backup)
			must(t, err)
			must(t, writeJournal(s, j))
			if tt.arg != "" {
				must(t, s.Files.WriteFile(path, withArg(t, prev, tt.arg), phases.ManifestMode))
			}
			if tt.arg == "--bogus-flag" {
				// The kubelet has acted on it: the old instance is gone.
				waitListening(t, addr, false)
			}
			if tt.rollback {
				must(t, j.startRollback())
				must(t, writeJournal(s, j))
			}

			err = resumeUpgrade(context.Background(), s, 5*time.Second)

			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("got %v, want an error with %q", err, tt.wantErr)
			}
			if got, _ := s.Files.ReadFile(path); (string(got) == string(prev)) != tt.wantPrev {
				t.Errorf("previous manifest in place: %v, want %v", !tt.wantPrev, tt.wantPrev)
			}
			if k.started() != tt.wantStart {
				t.Errorf("the component started %d times, want %d", k.started(), tt.wantStart)
			}
			if _, err := s.Files.ReadFile(journalPath(s.Config)); err == nil {
				t.Error("the journal is still there")
			}
		})
	}
}

// The upgrade tells instances apart by the process behind the checked
// address.
func TestInstanceOf(t *testing.T) {
	s := initialised(t)
	addr := freeAddr(t)
	target := schedulerTarget(s, addr)
	if _, err := instanceOf(target); !errors.Is(err, procnet.ErrNotListening) {
		t.Errorf("nothing on %s: got %v, want ErrNotListening", addr, err)
	}
	// A component that does not listen proves nothing about visibility.
	if err := checkProcessesVisible([]health.Target{target}); err != nil {
		t.Errorf("visibility with nothing listening: %v", err)
	}

	cmd := startComponent(t, s, addr)
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitListening(t, addr, true)
	if p, err := instanceOf(target); err != nil || p.PID != cmd.Process.Pid {
		t.Errorf("instance %s (%v), want the stand-in's pid %d", p, err, cmd.Process.Pid)
	}
	if err := checkProcessesVisible([]health.Target{target}); err != nil {
		t.Errorf("visibility of a child process: %v", err)
	}
}

// TestUpgradeClusterObjects: once the control plane runs the new release,
// upgrade apply stores the cluster's view that stock kubeadm reads, as
// kubeadm's upgrade apply does: kube-system/kubeadm-config names the new
// kubernetesVersion and kubelet-config holds the KubeletConfiguration the
// new configuration renders, even while another control-plane node still
// runs the previous release (whose API server keeps the addons where they
// are).
func TestUpgradeClusterObjects(t *testing.T) {
	s := phasestest.NewNode(t, t.TempDir(), "v1.35.4")
	var out bytes.Buffer
	s.Report = output.NewReporter(&out, false)
	// node2, another control-plane node, is not upgraded yet.
	s.API = fake.NewClientset(apiServerBehind())
	// init at v1.35.4 uploaded its view.
	s.Config.Kubelet.ExtraConfig = map[string]any{"maxPods": 50}
	must(t, phasestest.Run(s, phases.UploadConfig))
	ctx := context.Background()
	if got := kubeadmConfigVersion(t, s); got != "v1.35.4" {
		t.Fatalf("init uploaded kubernetesVersion %q", got)
	}

	s.Config.KubernetesVersion = "v1.36.3"
	s.Config.Kubelet.ExtraConfig = map[string]any{"maxPods": 60}
	must(t, upgradeClusterObjects(ctx, s, time.Second))

	if got := kubeadmConfigVersion(t, s); got != "v1.36.3" {
		t.Errorf("after upgrade apply kubeadm-config names kubernetesVersion %q, want v1.36.3", got)
	}
	kubelet, err := s.API.CoreV1().ConfigMaps("kube-system").Get(ctx, "kubelet-config", metav1.GetOptions{})
	must(t, err)
	want, err := phases.ClusterKubeletConfiguration(s.Config)
	must(t, err)
	var fields struct {
		MaxPods int `json:"maxPods"`
	}
	got := kubelet.Data["kubelet"]
	must(t, yaml.Unmarshal([]byte(got), &fields))
	if got != string(want) || fields.MaxPods != 60 {
		t.Errorf("after upgrade apply kubelet-config holds\n%s\nwant\n%s", got, want)
	}
	if v := kubelet.Annotations[templates.KubernetesVersionAnnotation]; v != "v1.36.3" {
		t.Errorf("after upgrade apply kubelet-config is annotated as of release %q, want v1.36.3", v)
	}
	if !strings.Contains(out.String(), "addons left as they are: node2") {
		t.Errorf("the addons moved while node2 runs v1.35.4:\n%s", out.String())
	}
}

// TestUpgradeClusterViewOfJoinedNode: on a node whose etcd member joined
// the cluster, upgrade apply reads the membership from the etcd manifest
// (phases.NewNode) and renders etcd with it, while the cluster's
// kubeadm-config, uploaded from the configuration, holds no join flag.
func TestUpgradeClusterViewOfJoinedNode(t *testing.T) {
	joined := templates.EtcdMembership{InitialCluster: "node0=https://10.0.0.9:2380,node1=https://10.0.0.10:2380"}
	written := phasestest.NewNode(t, t.TempDir(), "v1.36.3")
	written.Options.Offline = true
	written.Membership = joined // as etcd-join leaves it
	must(t, phasestest.Run(written, phases.Certs, phases.Kubeconfig, phases.KubeletConfig, phases.APIServerConfig, phases.Etcd, phases.ControlPlane, phases.Validate, phases.WriteManifests))

	s, err := phases.NewNode(written.Run, written.Config)
	must(t, err)
	if s.Membership != joined {
		t.Fatalf("the node read its etcd membership as %+v, want %+v", s.Membership, joined)
	}
	pods, _, err := wantedPods(s, nil)
	must(t, err)
	if flags := health.CommandFlags(pods[config.NameEtcd], config.NameEtcd); flags["initial-cluster"] != joined.InitialCluster || flags["initial-cluster-state"] != "existing" {
		t.Errorf("the upgrade renders etcd with %v, want the membership it joined with", flags)
	}
	s.Options.Offline = false
	s.API = fake.NewClientset(apiServerBehind())
	must(t, upgradeClusterObjects(context.Background(), s, time.Second))

	cm, err := s.API.CoreV1().ConfigMaps("kube-system").Get(context.Background(), "kubeadm-config", metav1.GetOptions{})
	must(t, err)
	if got := cm.Data["ClusterConfiguration"]; strings.Contains(got, "initial-cluster") || !strings.Contains(got, "kubernetesVersion: v1.36.3") {
		t.Errorf("kubeadm-config after the upgrade of a joined node:\n%s", got)
	}
}

// apiServerBehind is the API server pod of node2, another control-plane
// node, still at v1.35.4: upgrade apply leaves the addons as they are.
func apiServerBehind() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver-node2", Namespace: "kube-system", Labels: map[string]string{"component": config.NameAPIServer}},
		Spec:       corev1.PodSpec{NodeName: "node2", Containers: []corev1.Container{{Name: config.NameAPIServer, Image: "registry.k8s.io/kube-apiserver:v1.35.4"}}},
	}
}

// kubeadmConfigVersion is the kubernetesVersion of the ClusterConfiguration
// in kube-system/kubeadm-config.
func kubeadmConfigVersion(t *testing.T, s *phases.Node) string {
	t.Helper()
	cm, err := s.API.CoreV1().ConfigMaps("kube-system").Get(context.Background(), "kubeadm-config", metav1.GetOptions{})
	must(t, err)
	var cc struct {
		KubernetesVersion string `json:"kubernetesVersion"`
	}
	must(t, yaml.Unmarshal([]byte(cm.Data["ClusterConfiguration"]), &cc))
	return cc.KubernetesVersion
}

// TestUpgradeNodeComesAfterUpgradeApply: upgrade node on a control-plane
// node refuses, before it touches anything, while kubeadm-config names
// another release than its configuration: upgrade apply on the first node
// has not run.
func TestUpgradeNodeComesAfterUpgradeApply(t *testing.T) {
	s := initialised(t)
	s.Options.Offline = false
	s.API = fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kubeadm-config", Namespace: "kube-system"},
		Data: map[string]string{"ClusterConfiguration": "kind: ClusterConfiguration\nkubernetesVersion: v1.35.4\n"}})
	before := phasestest.Snapshot(t, s.Files.HostPath("/"))
	_, err := UpgradeNode(time.Second).Execute(context.Background(), s)
	want := "kube-system/kubeadm-config names kubernetesVersion v1.35.4, this node's configuration v1.36.3: run `kubeboot upgrade apply` on the first control-plane node first"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("upgrade node before upgrade apply: %v, want %q", err, want)
	}
	if after := phasestest.Snapshot(t, s.Files.HostPath("/")); !cmp.Equal(before, after) {
		t.Errorf("the refused upgrade changed files: %s", cmp.Diff(before, after))
	}
}

// TestCheckKubeletSkew: on a node whose kubelet systemd runs, an upgrade
// to a release older than the kubelet binary installed is refused; one to
// its release is not, and neither is any beside a kubelet systemd does
// not run (the lab's).
func TestCheckKubeletSkew(t *testing.T) {
	s := initialised(t)
	state := "active"
	s.System, _ = phasestest.FakeSystemd(&state) // the kubelet binary is v1.36.3
	if k, err := checkKubeletSkew(context.Background(), s, fake.NewClientset()); err != nil || k.Systemd {
		t.Errorf("without systemd: %v, %+v", err, k)
	}
	must(t, os.MkdirAll(s.Files.HostPath(phases.SystemdRunDir), 0o755))
	if k, err := checkKubeletSkew(context.Background(), s, fake.NewClientset()); err != nil || !k.Systemd || k.Release.String() != "1.36.3" {
		t.Errorf("a kubelet of the target release: %v, %+v", err, k)
	}
	s.Config.KubernetesVersion = "v1.35.4"
	want := "the kubelet on the PATH is v1.36.3, newer than the control plane this upgrade brings (v1.35.4)"
	if _, err := checkKubeletSkew(context.Background(), s, fake.NewClientset()); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a kubelet newer than the target: %v, want %q", err, want)
	}
}

// TestWantedPodsValidatesWhatItWouldWrite: the upgrade validates a
// rendered manifest other than the node's, which it would write, and
// refuses one the kubelet would reject (here, patched to mount a Secret);
// the same bytes already on the node, which it would not write, are not
// decoded again.
func TestWantedPodsValidatesWhatItWouldWrite(t *testing.T) {
	s := initialised(t)
	patches := s.Files.HostPath("/patches")
	must(t, os.MkdirAll(patches, 0o755))
	must(t, os.WriteFile(patches+"/kube-apiserver+strategic.yaml", []byte(
		"spec:\n  volumes:\n  - name: token\n    secret:\n      secretName: apiserver-token\n"), 0o600))
	s.Config.PatchesDir = "/patches"

	have := nodeManifests(t, s)
	_, data, err := wantedPods(s, have)
	if err == nil || !strings.Contains(err.Error(), "static pods may not reference secrets") {
		t.Fatalf("a changed manifest that mounts a Secret: want it refused, got %v", err)
	}
	have[config.NameAPIServer] = data[config.NameAPIServer]
	if _, _, err := wantedPods(s, have); err != nil {
		t.Errorf("the same manifest already on the node: want it left unvalidated, got %v", err)
	}
}
