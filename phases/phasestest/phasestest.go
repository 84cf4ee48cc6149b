// Package phasestest holds test helpers for the packages built on phases
// (join, day2) and for phases' external tests: a Node on a throw-away
// root, running phases, reading and comparing the files they write, and a
// CRI image service to check images against.
package phasestest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/files"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/pki"
	"github.com/kubeboot/kubeboot/templates"
)

// NewNode is a quiet control-plane node1 (10.0.0.10) at version, writing
// under root, on a machine without systemd or a kubelet (FakeSystemd
// gives it both).
func NewNode(t testing.TB, root, version string) *phases.Node {
	t.Helper()
	c := config.New()
	c.KubernetesVersion = version
	config.SetDefaults(c, config.Host{Name: "node1", Address: "10.0.0.10"})
	if errs := config.Validate(c); len(errs) > 0 {
		t.Fatal(errs.ToAggregate())
	}
	n, err := phases.NewNode(NewRun(root, output.NewReporter(&bytes.Buffer{}, false)), c)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Kubeboot is the kubeboot binary of the tests' runs: the package's.
var Kubeboot = templates.Kubeboot{Binary: "/usr/bin/kubeboot", Version: "v0.0.0-test"}

// NewRun is a run writing under root and reporting to report, on a
// machine without systemd or a kubelet on its PATH, with Kubeboot.
func NewRun(root string, report *output.Reporter) *workflow.Run {
	return &workflow.Run{Files: &files.AtomicWriter{Root: root}, Report: report, System: workflow.System{
		Systemctl:  func(context.Context, ...string) ([]byte, error) { return nil, errors.New("this test has no systemd") },
		LookPath:   func(file string) (string, error) { return "", &exec.Error{Name: file, Err: exec.ErrNotFound} },
		DeleteLink: noLinks,
		Kubeboot:   Kubeboot,
	}}
}

// Run runs the given phases of d in order.
func Run[D workflow.Data](d D, list ...workflow.Phase[D]) error {
	_, err := workflow.Runner[D]{Phases: list}.Run(context.Background(), d, nil)
	return err
}

// HostFile reads a node path of the run of d.
func HostFile(t testing.TB, d workflow.Data, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(d.Base().Files.HostPath(path))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// ParseCert parses the certificate name of s's PKI.
func ParseCert(t testing.TB, s *phases.Node, name string) *x509.Certificate {
	t.Helper()
	data := HostFile(t, s, s.Config.CertPath(name))
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("no PEM block in %s", name)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// ClusterCA reads the cluster CA of s, certificate and key.
func ClusterCA(t testing.TB, s *phases.Node) pki.KeyPair {
	t.Helper()
	return pki.KeyPair{Cert: HostFile(t, s, s.Config.CertPath(config.CertCA)), Key: HostFile(t, s, s.Config.KeyPath(config.CertCA))}
}

// KubeletPair writes the client certificate the kubelet rotates, as its
// certificate manager does: <kubelet.certDir>/kubelet-client-<time>.pem
// holding a certificate from ca for system:node:<node> (O system:nodes),
// valid for certificates.leafValidity, then its key, and the symlink
// kubelet-client-current.pem to it. It returns the symlink's node path.
// The certificate is ECDSA P-256, as the kubelet's.
func KubeletPair(t testing.TB, s *phases.Node, ca pki.KeyPair, node string) string {
	t.Helper()
	spec := pki.CertSpec{Name: "kubelet-client", CN: "system:node:" + node, Org: []string{"system:nodes"}, Usage: pki.UsageClient, CA: config.CertCA,
		Algorithm: config.ECDSAP256, Validity: s.Config.Certificates.LeafValidity.Duration}
	pair, err := pki.Issue(spec, ca, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := s.Config.Kubelet.CertDir
	file := filepath.Join(dir, "kubelet-client-"+time.Now().Format("2006-01-02-15-04-05.000000000")+".pem")
	current := filepath.Join(dir, pki.KubeletClientFile)
	if err := os.MkdirAll(s.Files.HostPath(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.Files.HostPath(file), slices.Concat(pair.Cert, pair.Key), 0o600); err != nil {
		t.Fatal(err)
	}
	// HostPath would follow an existing symlink: replace the link itself.
	// The kubelet's link is absolute; a relative one means the same, and
	// Snapshot can follow it under a root.
	link := filepath.Join(s.Files.HostPath(dir), pki.KubeletClientFile)
	_ = os.Remove(link)
	if err := os.Symlink(filepath.Base(file), link); err != nil {
		t.Fatal(err)
	}
	return current
}

// FileState is what a re-run must not change about a file.
type FileState struct {
	// ModTime, Mode and Content are the file's.
	ModTime time.Time
	Mode    fs.FileMode
	Content string
}

// Snapshot records every file under root, by path relative to root (a
// socket without content).
func Snapshot(t testing.TB, root string) map[string]FileState {
	t.Helper()
	out := map[string]FileState{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		var data []byte
		if info.Mode().Type()&fs.ModeSocket == 0 {
			if data, err = os.ReadFile(path); err != nil {
				return err
			}
		}
		out[strings.TrimPrefix(path, root)] = FileState{info.ModTime(), info.Mode(), string(data)}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// FakeSystemd is a fake systemd for a run's System: kubelet.service is in
// *state ("active" or another state, which a restart makes "active") and
// enabled, the kubelet is /usr/bin/kubelet of
// config.DefaultKubernetesVersion, kubeboot Kubeboot, and no network
// interface may be deleted. It also returns the
// systemctl commands run, each as its space-joined arguments.
func FakeSystemd(state *string) (workflow.System, *[]string) {
	calls := &[]string{}
	systemctl := func(_ context.Context, args ...string) ([]byte, error) {
		*calls = append(*calls, strings.Join(args, " "))
		switch args[0] {
		case "is-active":
			if *state != "active" {
				return []byte(*state + "\n"), errors.New("exit status 3")
			}
			return []byte("active\n"), nil
		case "is-enabled":
			return []byte("enabled\n"), nil
		case "restart":
			*state = "active"
		}
		return nil, nil
	}
	return workflow.System{Systemctl: systemctl, LookPath: func(string) (string, error) { return "/usr/bin/kubelet", nil },
		Version: func(context.Context, string) (string, error) {
			return "Kubernetes " + config.DefaultKubernetesVersion + "\n", nil
		},
		DeleteLink: noLinks, Kubeboot: Kubeboot}, calls
}

// noLinks is the DeleteLink of a test that has no network interfaces to
// delete.
func noLinks(name string) (bool, error) {
	return false, fmt.Errorf("delete the network interface %s: this test has none", name)
}

// ServeImages serves a CRI image service on the unix socket sock until the
// test ends. It holds the images whose repository's last path element is
// one of names, at any tag (registry.k8s.io/etcd:3.6.8-0 for "etcd"), and
// can pull nothing else: a node's runtime, as far as kubeboot's image
// checks can tell.
func ServeImages(t testing.TB, sock string, names ...string) {
	t.Helper()
	serveCRI(t, sock, func(server *grpc.Server) {
		runtimeapi.RegisterImageServiceServer(server, imageService{names: names})
		runtimeapi.RegisterRuntimeServiceServer(server, runtimeService{})
	})
}

// serveCRI serves on the unix socket sock, until the test ends, the CRI
// services register registers.
func serveCRI(t testing.TB, sock string, register func(*grpc.Server)) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer()
	register(server)
	served := make(chan error, 1)
	go func() { served <- server.Serve(l) }()
	t.Cleanup(func() {
		server.Stop()
		if err := <-served; err != nil {
			t.Errorf("the CRI services on %s: %v", sock, err)
		}
	})
}

// runtimeService is the CRI runtime service of ServeImages: it answers
// Version, as a runtime serving the CRI does, and nothing else.
type runtimeService struct {
	runtimeapi.UnimplementedRuntimeServiceServer
}

// Version names the fake runtime.
func (runtimeService) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: "phasestest", RuntimeVersion: "1.0"}, nil
}

// ServePods serves a CRI runtime service on the unix socket sock until the
// test ends, holding the pods named (namespace/name), each in a ready
// sandbox, which it stops and removes as told. It returns what it holds
// then, as "namespace/name ready" or "namespace/name stopped".
func ServePods(t testing.TB, sock string, pods ...string) func() []string {
	t.Helper()
	r := &podRuntime{ready: map[string]bool{}}
	for _, p := range pods {
		r.ready[p] = true
	}
	serveCRI(t, sock, func(server *grpc.Server) { runtimeapi.RegisterRuntimeServiceServer(server, r) })
	return func() []string {
		r.mu.Lock()
		defer r.mu.Unlock()
		var held []string
		for p, ready := range r.ready {
			held = append(held, p+map[bool]string{true: " ready", false: " stopped"}[ready])
		}
		slices.Sort(held)
		return held
	}
}

// podRuntime is the CRI runtime service of ServePods: each pod's sandbox
// ID is its namespace/name.
type podRuntime struct {
	runtimeService
	mu sync.Mutex
	// ready says, of each pod held, whether its sandbox is ready.
	ready map[string]bool
}

// ListPodSandbox lists the pods held, filtered by state.
func (r *podRuntime) ListPodSandbox(_ context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	resp := &runtimeapi.ListPodSandboxResponse{}
	for p, ready := range r.ready {
		state := runtimeapi.PodSandboxState_SANDBOX_NOTREADY
		if ready {
			state = runtimeapi.PodSandboxState_SANDBOX_READY
		}
		if want := req.GetFilter().GetState(); want != nil && want.GetState() != state {
			continue
		}
		ns, name, _ := strings.Cut(p, "/")
		resp.Items = append(resp.Items, &runtimeapi.PodSandbox{Id: p, State: state, Metadata: &runtimeapi.PodSandboxMetadata{Namespace: ns, Name: name}})
	}
	return resp, nil
}

// StopPodSandbox stops a pod's sandbox.
func (r *podRuntime) StopPodSandbox(_ context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.ready[req.GetPodSandboxId()]; ok {
		r.ready[req.GetPodSandboxId()] = false
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

// RemovePodSandbox removes a stopped pod's sandbox, and refuses a ready
// one: kubeboot stops a pod before it removes it.
func (r *podRuntime) RemovePodSandbox(_ context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ready[req.GetPodSandboxId()] {
		return nil, fmt.Errorf("sandbox %s is running: stop it first", req.GetPodSandboxId())
	}
	delete(r.ready, req.GetPodSandboxId())
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

// imageService is the CRI image service of ServeImages.
type imageService struct {
	runtimeapi.UnimplementedImageServiceServer
	names []string
}

// image is the runtime's image for ref, or nil.
func (s imageService) image(ref string) *runtimeapi.Image {
	repo, _, _ := strings.Cut(ref, "@")
	repo = repo[strings.LastIndex(repo, "/")+1:]
	repo, _, _ = strings.Cut(repo, ":")
	if !slices.Contains(s.names, repo) {
		return nil
	}
	sum := sha256.Sum256([]byte(ref))
	return &runtimeapi.Image{Id: "sha256:" + hex.EncodeToString(sum[:]), RepoTags: []string{ref}}
}

func (s imageService) ImageStatus(_ context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	return &runtimeapi.ImageStatusResponse{Image: s.image(req.GetImage().GetImage())}, nil
}

func (s imageService) PullImage(_ context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	img := s.image(req.GetImage().GetImage())
	if img == nil {
		return nil, status.Errorf(codes.NotFound, "image %q: no registry holds it", req.GetImage().GetImage())
	}
	return &runtimeapi.PullImageResponse{ImageRef: img.Id}, nil
}

// Unchanged records v (a configuration) as JSON and returns a check that
// fails the test when v no longer marshals the same, naming what ran
// since: the configuration is read-only once loaded.
func Unchanged(t testing.TB, v any) func(what string) {
	t.Helper()
	before, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return func(what string) {
		t.Helper()
		after, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(before, after) {
			t.Errorf("%s changed the configuration:\nbefore %s\nafter  %s", what, before, after)
		}
	}
}
