package controlplane

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/files"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
	"github.com/kubeboot/kubeboot/templates"
)

// regularFiles lists the regular files under the node's root.
func regularFiles(t *testing.T, s *phases.Node) []string {
	t.Helper()
	var files []string
	root := s.Files.HostPath("/")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			files = append(files, strings.TrimPrefix(path, root))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// withEtcdData gives the node's etcd data dir an etcd member's layout.
func withEtcdData(t *testing.T, s *phases.Node) {
	t.Helper()
	dir := s.Files.HostPath(filepath.Join(s.Config.Etcd.Local.DataDir, "member"))
	must(t, os.MkdirAll(filepath.Join(dir, "snap"), 0o700))
	must(t, os.MkdirAll(filepath.Join(dir, "wal"), 0o700))
	must(t, os.WriteFile(filepath.Join(dir, "snap", "db"), []byte("data"), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "wal", "0000000000000000-0000000000000000.wal"), []byte("wal"), 0o600))
}

// TestResetRefusesADataDirNotEtcds: a data dir that holds anything but an
// etcd member's data is someone else's, and reset --force removes
// nothing at all, with an exit-2 error naming the field; an empty one and
// an etcd member's go.
func TestResetRefusesADataDirNotEtcds(t *testing.T) {
	for _, tt := range []struct {
		name, why string
		fill      func(t *testing.T, host string)
	}{
		{"a package database", "holds status", func(t *testing.T, host string) {
			must(t, os.WriteFile(filepath.Join(host, "status"), []byte("Package: bash\n"), 0o644))
		}},
		{"etcd data and more", "holds notes.txt", func(t *testing.T, host string) {
			must(t, os.MkdirAll(filepath.Join(host, "member", "snap"), 0o700))
			must(t, os.MkdirAll(filepath.Join(host, "member", "wal"), 0o700))
			must(t, os.WriteFile(filepath.Join(host, "notes.txt"), []byte("mine"), 0o644))
		}},
		{"a member holding a file of someone else's", "holds member/notes.txt", func(t *testing.T, host string) {
			must(t, os.MkdirAll(filepath.Join(host, "member", "snap"), 0o700))
			must(t, os.WriteFile(filepath.Join(host, "member", "notes.txt"), []byte("mine"), 0o644))
		}},
		{"a file named member", "holds member", func(t *testing.T, host string) {
			must(t, os.WriteFile(filepath.Join(host, "member"), []byte("x"), 0o644))
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := initialised(t)
			host := s.Files.HostPath(s.Config.Etcd.Local.DataDir)
			must(t, os.MkdirAll(host, 0o700))
			tt.fill(t, host)
			before := regularFiles(t, s)
			_, err := resetNode(context.Background(), s, ResetOptions{Force: true})
			if err == nil || exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), "etcd.local.dataDir: "+s.Config.Etcd.Local.DataDir+" "+tt.why) ||
				!strings.Contains(err.Error(), "check etcd.local.dataDir in the configuration") {
				t.Fatalf("got %v (exit %d), want an exit-2 refusal: %s", err, exit.Code(err), tt.why)
			}
			if after := regularFiles(t, s); !slices.Equal(after, before) {
				t.Errorf("a refused reset changed the node: %v -> %v", before, after)
			}
		})
	}
	for _, fill := range []func(s *phases.Node){
		func(s *phases.Node) { must(t, os.MkdirAll(s.Files.HostPath(s.Config.Etcd.Local.DataDir), 0o700)) },
		func(s *phases.Node) { withEtcdData(t, s) },
		// A member killed while it created its first WAL, or whose WAL
		// is elsewhere (--wal-dir).
		func(s *phases.Node) {
			must(t, os.MkdirAll(s.Files.HostPath(filepath.Join(s.Config.Etcd.Local.DataDir, "member", "wal.tmp")), 0o700))
		},
	} {
		s := initialised(t)
		fill(s)
		if _, err := resetNode(context.Background(), s, ResetOptions{Force: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(s.Files.HostPath(s.Config.Etcd.Local.DataDir)); err == nil {
			t.Error("the data dir is still there")
		}
	}
}

// TestResetChecksTheDataDirAgainBeforeRemoving: what lands in the data
// dir while reset runs (here, while it removes the manifests) stops it
// before the data dir goes.
func TestResetChecksTheDataDirAgainBeforeRemoving(t *testing.T) {
	s := initialised(t)
	withEtcdData(t, s)
	late := filepath.Join(s.Files.HostPath(s.Config.Etcd.Local.DataDir), "late.txt")
	s.Files = &lateWriter{Writer: s.Files, at: s.Config.KubeconfigPath(config.KubeconfigAdmin), t: t, late: late}
	_, err := resetNode(context.Background(), s, ResetOptions{Force: true})
	if err == nil || !strings.Contains(err.Error(), "holds late.txt") {
		t.Fatalf("got %v, want a refusal naming late.txt", err)
	}
	if _, err := os.Stat(late); err != nil {
		t.Errorf("the data dir went: %v", err)
	}
}

// lateWriter writes late when reset removes at.
type lateWriter struct {
	files.Writer
	at, late string
	t        *testing.T
}

func (w *lateWriter) Remove(path string) error {
	if path == w.at {
		must(w.t, os.WriteFile(w.late, []byte("late"), 0o600))
	}
	return w.Writer.Remove(path)
}

func TestResetRefusesEtcdDataWithoutForce(t *testing.T) {
	s := initialised(t)
	withEtcdData(t, s)
	before := regularFiles(t, s)
	asked := ""
	_, err := resetNode(context.Background(), s, ResetOptions{Confirm: func(q string) bool { asked = q; return false }})
	if err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("want a refusal naming --force, got %v", err)
	}
	if !strings.Contains(asked, s.Config.Etcd.Local.DataDir) {
		t.Errorf("the question %q does not name the data dir", asked)
	}
	if after := regularFiles(t, s); len(after) != len(before) {
		t.Errorf("a refused reset removed %d files", len(before)-len(after))
	}
}

func TestResetRemovesEverythingKubebootWrote(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts ResetOptions
	}{
		{"force", ResetOptions{Force: true}},
		{"confirmed", ResetOptions{Confirm: func(string) bool { return true }}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := initialised(t)
			withEtcdData(t, s)
			c := s.Config
			// Leftovers of an interrupted write, in two directories.
			must(t, os.WriteFile(s.Files.HostPath(filepath.Join(c.Paths.ManifestsDir, ".etcd.yaml.tmp-1")), nil, 0o600))
			must(t, os.WriteFile(s.Files.HostPath(filepath.Join(c.Certificates.Dir, ".ca.key.tmp-2")), nil, 0o600))
			// The record of the live phases' applies.
			must(t, os.WriteFile(s.Files.HostPath(phases.ApplyRecordPath(c)), []byte("{}\n"), 0o600))
			// The kubelet's certificates, which this cluster's CA issued.
			certDir := s.Files.HostPath(c.Kubelet.CertDir)
			must(t, os.MkdirAll(certDir, 0o700))
			must(t, os.WriteFile(filepath.Join(certDir, "kubelet-client-2026-11-27-10-00-00.pem"), []byte("pair"), 0o600))
			must(t, os.Symlink(filepath.Join(c.Kubelet.CertDir, "kubelet-client-2026-11-27-10-00-00.pem"), filepath.Join(certDir, "kubelet-client-current.pem")))
			must(t, os.WriteFile(filepath.Join(certDir, "kubelet.crt"), []byte("cert"), 0o600))
			// The pod network kubeboot's flannel made on the node: its
			// files go.
			for path, data := range map[string]string{templates.FlannelCNIConfPath: templates.FlannelCNIConfig, templates.FlannelSubnetFile: "FLANNEL_SUBNET=10.244.0.1/24\n"} {
				must(t, os.MkdirAll(filepath.Dir(s.Files.HostPath(path)), 0o755))
				must(t, os.WriteFile(s.Files.HostPath(path), []byte(data), 0o644))
			}
			links := map[string]bool{"cni0": true}
			s.System.DeleteLink = func(name string) (bool, error) {
				had := links[name]
				delete(links, name)
				return had, nil
			}
			res, err := resetNode(context.Background(), s, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if left := regularFiles(t, s); len(left) > 0 {
				t.Errorf("files left after reset: %s", strings.Join(left, ", "))
			}
			for _, gone := range []string{c.Certificates.Dir, c.Etcd.Local.DataDir, filepath.Join(c.Paths.KubeconfigDir, "kubeboot"), filepath.Join(c.Kubelet.CertDir, "kubelet-client-current.pem")} {
				if _, err := os.Lstat(s.Files.HostPath(gone)); err == nil {
					t.Errorf("%s is still there", gone)
				}
			}
			// The CSR approver, a client of the API server, goes with the
			// control plane, before it.
			wantFirst := []string{c.ManifestPath(config.NameCSRApprover), c.ManifestPath(config.NameScheduler), c.ManifestPath(config.NameControllerManager),
				c.ManifestPath(config.NameAPIServer), c.ManifestPath(config.NameEtcd)}
			if len(res.Removed) < 5 || !slices.Equal(res.Removed[:5], wantFirst) {
				t.Errorf("the manifests must go first, etcd's last, removed: %v", res.Removed)
			}
			// A reset of files under --root leaves this machine's
			// interfaces, and says how to delete the other's.
			if left := strings.Join(res.Left, "\n"); len(links) != 1 || !strings.Contains(left, "kubelet") || !strings.Contains(left, "iptables") || !strings.Contains(left, "`ip link delete cni0` there") {
				t.Errorf("reset of another machine's files deleted interfaces (left %v) or does not say it left the kubelet, the packet filter's rules and the interfaces: %v", links, res.Left)
			}
		})
	}
}

func TestResetKeepPKIAndForeignFiles(t *testing.T) {
	s := initialised(t)
	c := s.Config
	foreign := filepath.Join(c.Certificates.Dir, "etcd", "notes.txt")
	must(t, os.WriteFile(s.Files.HostPath(foreign), []byte("mine"), 0o600))
	res, err := resetNode(context.Background(), s, ResetOptions{KeepPKI: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, kept := range []string{c.CertPath(config.CertCA), c.KeyPath(config.CertCA), c.EncryptionConfigPath(), foreign} {
		if _, err := os.Stat(s.Files.HostPath(kept)); err != nil {
			t.Errorf("--keep-pki removed %s", kept)
		}
	}
	if _, err := os.Stat(s.Files.HostPath(c.KubeconfigPath(config.KubeconfigAdmin))); err == nil {
		t.Error("admin.conf survived reset")
	}
	if !strings.Contains(strings.Join(res.Left, "\n"), "--keep-pki") {
		t.Errorf("reset does not say it kept the PKI: %v", res.Left)
	}

	// Without --keep-pki the foreign file stays, and reset says so.
	res, err = resetNode(context.Background(), s, ResetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if left := regularFiles(t, s); len(left) != 1 || left[0] != foreign {
		t.Errorf("want only %s left, got %v", foreign, left)
	}
	if !strings.Contains(strings.Join(res.Left, "\n"), foreign+": not written by kubeboot") {
		t.Errorf("reset does not list the foreign file: %v", res.Left)
	}
}

func TestResetDryRunRemovesNothing(t *testing.T) {
	s := initialised(t)
	before := regularFiles(t, s)
	s.Files = &files.DryRunWriter{Root: s.Files.HostPath("/"), Report: s.Report}
	s.Options.DryRun = true
	res, err := resetNode(context.Background(), s, ResetOptions{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Removed) == 0 {
		t.Error("a dry run reports nothing to remove")
	}
	if after := regularFiles(t, s); len(after) != len(before) {
		t.Errorf("a dry run removed %d files", len(before)-len(after))
	}
}

func TestWaitStopped(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	l := []phases.Listener{{Component: "kube-apiserver", Host: host, Port: port}}
	s := &workflow.Run{Report: output.NewReporter(io.Discard, false)}
	err = waitStopped(context.Background(), s, stopping{listeners: l}, 600*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "kube-apiserver on "+ln.Addr().String()) {
		t.Errorf("want a timeout naming the open listener, got %v", err)
	}
	go func() { time.Sleep(300 * time.Millisecond); _ = ln.Close() }()
	if err := waitStopped(context.Background(), s, stopping{listeners: l}, 5*time.Second); err != nil {
		t.Errorf("the listener closed, yet: %v", err)
	}
}

// A component that closes its socket first and exits later, as a stopping
// API server does, is waited for until its process is gone.
func TestWaitStoppedWaitsForTheProcess(t *testing.T) {
	s := initialised(t)
	addr := freeAddr(t)
	cmd := startComponent(t, s, addr, componentLingerEnv+"=1500ms")
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	host, port, _ := net.SplitHostPort(addr)
	l := []phases.Listener{{Component: "kube-apiserver", Host: host, Port: port}}
	waitListening(t, addr, true)
	st := stoppingNow(s, l)
	if len(st.procs) != 1 || st.procs[0].process.PID != cmd.Process.Pid {
		t.Fatalf("recorded %+v, want the stand-in's pid %d", st.procs, cmd.Process.Pid)
	}

	must(t, cmd.Process.Signal(syscall.SIGTERM))
	if err := waitStopped(context.Background(), s.Run, st, 800*time.Millisecond); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("kube-apiserver (pid %d", cmd.Process.Pid)) {
		t.Errorf("want a timeout naming the lingering process, got %v", err)
	}
	if len(openListeners(l)) > 0 {
		t.Fatal("the stand-in still listens after SIGTERM")
	}
	must(t, waitStopped(context.Background(), s.Run, st, 5*time.Second))
	select {
	case <-exited:
	case <-time.After(time.Second):
		t.Error("waitStopped returned while the process still ran")
	}
}

// sandboxes is a container runtime whose kube-system pods' sandboxes are
// ready until stopped is closed.
type sandboxes struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	pods    []string
	stopped chan struct{}
}

// ListPodSandbox lists the pods' sandboxes, ready until stopped.
func (s sandboxes) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	state := runtimeapi.PodSandboxState_SANDBOX_READY
	select {
	case <-s.stopped:
		state = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	default:
	}
	var items []*runtimeapi.PodSandbox
	for _, pod := range s.pods {
		items = append(items, &runtimeapi.PodSandbox{Metadata: &runtimeapi.PodSandboxMetadata{Namespace: "kube-system", Name: pod}, State: state})
	}
	return &runtimeapi.ListPodSandboxResponse{Items: items}, nil
}

// A component between two restarts listens nowhere and has no process,
// yet the kubelet runs its pod and may start it again: the wait lasts
// until the runtime holds no ready sandbox of it.
func TestWaitStoppedWaitsForTheSandbox(t *testing.T) {
	s := initialised(t)
	sock := s.Files.HostPath("/run/cri.sock")
	must(t, os.MkdirAll(filepath.Dir(sock), 0o755))
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	runtime := sandboxes{pods: []string{"kube-apiserver-" + s.Config.Node.Name}, stopped: make(chan struct{})}
	server := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(server, runtime)
	go func() { _ = server.Serve(ln) }()
	t.Cleanup(server.Stop)
	host, port, _ := net.SplitHostPort(freeAddr(t))
	st := stoppingNow(s, []phases.Listener{{Component: "kube-apiserver", Host: host, Port: port}})
	st.runtime = "unix:///run/cri.sock"
	if !slices.Equal(st.pods, runtime.pods) {
		t.Fatalf("stopping pods %v, want %v", st.pods, runtime.pods)
	}
	if err := waitStopped(context.Background(), s.Run, st, 600*time.Millisecond); err == nil || !strings.Contains(err.Error(), "static pod kube-apiserver-"+s.Config.Node.Name) {
		t.Errorf("want a timeout naming the ready sandbox, got %v", err)
	}
	go func() { time.Sleep(300 * time.Millisecond); close(runtime.stopped) }()
	if err := waitStopped(context.Background(), s.Run, st, 5*time.Second); err != nil {
		t.Errorf("the sandbox stopped, yet: %v", err)
	}
}

// reset removes the files kubeboot writes, one by one, and a directory
// only once it is empty: whatever else is there stays and is listed.
func TestResetLeavesFilesKubebootDidNotWrite(t *testing.T) {
	s := initialised(t)
	withEtcdData(t, s)
	c := s.Config
	foreign := []string{
		filepath.Join(c.APIServerConfigDir(), "my-audit-policy.yaml"),
		filepath.Join(c.Certificates.Dir, "notes.txt"),
		filepath.Join(c.Paths.KubeconfigDir, "kubeboot", "backups", "mine.yaml"),
	}
	for _, path := range foreign {
		must(t, os.MkdirAll(s.Files.HostPath(filepath.Dir(path)), 0o700))
		must(t, os.WriteFile(s.Files.HostPath(path), []byte("mine"), 0o600))
	}
	res, err := resetNode(context.Background(), s, ResetOptions{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(foreign, regularFiles(t, s), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("files left after reset (-want +got):\n%s", diff)
	}
	for _, path := range foreign {
		if want := path + ": not written by kubeboot"; !slices.Contains(res.Left, want) {
			t.Errorf("reset does not list %q in %q", want, res.Left)
		}
		if slices.Contains(res.Removed, filepath.Dir(path)) {
			t.Errorf("reset says it removed %s, which holds %s", filepath.Dir(path), path)
		}
	}
	if _, err := os.Stat(s.Files.HostPath(filepath.Join(c.Certificates.Dir, "etcd"))); err == nil {
		t.Error("the emptied etcd PKI dir is still there")
	}
}

// A dry run says what it would remove, and never that it removed it.
func TestResetDryRunSaysWouldRemove(t *testing.T) {
	s := initialised(t)
	must(t, os.WriteFile(s.Files.HostPath(filepath.Join(s.Config.Paths.ManifestsDir, ".etcd.yaml.tmp-1")), nil, 0o600))
	var out strings.Builder
	s.Report = output.NewReporter(&out, false)
	s.Files = &files.DryRunWriter{Root: s.Files.HostPath("/"), Report: s.Report}
	s.Options.DryRun = true
	res, err := resetNode(context.Background(), s, ResetOptions{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var would int
	for _, line := range lines {
		if strings.Contains(line, "removed") {
			t.Errorf("a dry run says %q", line)
		}
		if strings.HasPrefix(line, "would remove ") {
			would++
		}
	}
	if would != len(res.Removed) {
		t.Errorf("%d lines say would remove, for %d paths:\n%s", would, len(res.Removed), out.String())
	}
}

// TestResetStopsTheKubelet: once the static pods have stopped, reset on a
// control-plane node stops kubelet.service and removes kubeboot's drop-in
// (then reloads systemd), as a worker's reset does, and stops and removes
// the scheduled renewal's timer and service.
func TestResetStopsTheKubelet(t *testing.T) {
	s := initialisedWith(t, func(c *config.ClusterConfiguration) {
		c.Node.AdvertiseAddress = "127.0.0.94" // where no test listens
		c.Timeouts.ControlPlane.Duration = 5 * time.Second
		c.Certificates.ScheduledRenewal = &config.ScheduledRenewal{Interval: metav1.Duration{Duration: time.Hour}}
	})
	s.Options.Offline = false
	must(t, os.MkdirAll(s.Files.HostPath(phases.SystemdRunDir), 0o755))
	unit, err := phases.ControlPlaneKubelet(s)
	must(t, err)
	must(t, s.Files.WriteFile(phases.SystemdDropIn, unit.DropIn("/usr/bin/kubelet"), 0o644))
	state := "active"
	sys, calls := phasestest.FakeSystemd(&state)
	s.System = sys
	must(t, phasestest.Run(s, phases.CertsRenewal))
	*calls = nil
	res, err := resetNode(context.Background(), s, ResetOptions{Force: true})
	must(t, err)
	if got := strings.Join(*calls, ","); got != "is-active kubelet,stop kubelet,daemon-reload,disable --now kubeboot-certs-renew.timer,daemon-reload" {
		t.Errorf("systemctl calls %q", got)
	}
	for _, path := range []string{phases.SystemdDropIn, phases.RenewalTimer, phases.RenewalService} {
		if !slices.Contains(res.Removed, path) {
			t.Errorf("removed %v, not %s", res.Removed, path)
		}
		if _, err := os.Stat(s.Files.HostPath(path)); !os.IsNotExist(err) {
			t.Errorf("%s is still there: %v", path, err)
		}
	}
}
