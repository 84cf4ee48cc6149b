package cri_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kubeboot/kubeboot/internal/cri"
	"github.com/kubeboot/kubeboot/phases/phasestest"
)

func identity(p string) string { return p }

func TestMissingAndPull(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "cri.sock")
	phasestest.ServeImages(t, sock, "etcd", "kube-apiserver")
	images, err := cri.Dial("unix://"+sock, identity)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = images.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	refs := []string{"registry.k8s.io/etcd:3.6.8-0", "registry.k8s.io/kube-apiserver:v1.36.3", "registry.k8s.io/kube-scheduler:v1.36.3"}
	missing, err := images.Missing(ctx, refs)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"registry.k8s.io/kube-scheduler:v1.36.3"}, missing); diff != "" {
		t.Errorf("missing images (-want +got):\n%s", diff)
	}
	if id, err := images.Pull(ctx, refs[1]); err != nil || id == "" {
		t.Errorf("pull a present image: id %q, %v", id, err)
	}
	if _, err := images.Pull(ctx, refs[2]); err == nil {
		t.Error("pulling an image the runtime cannot get succeeded")
	}
}

func TestDialWithoutRuntime(t *testing.T) {
	_, err := cri.Dial("unix://"+filepath.Join(t.TempDir(), "none.sock"), identity)
	if !errors.Is(err, cri.ErrNoRuntime) {
		t.Errorf("dial a missing socket: got %v, want ErrNoRuntime", err)
	}
	if _, err := cri.Dial("tcp://127.0.0.1:1", identity); err == nil {
		t.Error("a tcp endpoint was accepted")
	}
}

// sandboxes is a runtime service holding pod sandboxes, for ReadyPods.
type sandboxes struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	items []*runtimeapi.PodSandbox
}

// ListPodSandbox lists the sandboxes in the filter's state.
func (s sandboxes) ListPodSandbox(_ context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	var items []*runtimeapi.PodSandbox
	for _, sb := range s.items {
		if f := req.GetFilter().GetState(); f == nil || f.GetState() == sb.GetState() {
			items = append(items, sb)
		}
	}
	return &runtimeapi.ListPodSandboxResponse{Items: items}, nil
}

// TestReadyPods: the static pods named that have a ready sandbox in
// kube-system, once each; a stopped sandbox, another namespace's pod of
// the same name and a pod not asked for are not listed.
func TestReadyPods(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	sandbox := func(ns, name string, state runtimeapi.PodSandboxState) *runtimeapi.PodSandbox {
		return &runtimeapi.PodSandbox{Metadata: &runtimeapi.PodSandboxMetadata{Namespace: ns, Name: name}, State: state}
	}
	server := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(server, sandboxes{items: []*runtimeapi.PodSandbox{
		sandbox("kube-system", "kube-apiserver-cp1", runtimeapi.PodSandboxState_SANDBOX_READY),
		sandbox("kube-system", "kube-apiserver-cp1", runtimeapi.PodSandboxState_SANDBOX_READY),
		sandbox("kube-system", "etcd-cp1", runtimeapi.PodSandboxState_SANDBOX_NOTREADY),
		sandbox("default", "kube-scheduler-cp1", runtimeapi.PodSandboxState_SANDBOX_READY),
		sandbox("kube-system", "coredns-abc", runtimeapi.PodSandboxState_SANDBOX_READY),
	}})
	go func() { _ = server.Serve(l) }()
	defer server.Stop()
	runtime, err := cri.Dial("unix://"+sock, identity)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = runtime.Close() }()
	ready, err := runtime.ReadyPods(t.Context(), []string{"kube-apiserver-cp1", "etcd-cp1", "kube-scheduler-cp1"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"kube-apiserver-cp1"}, ready); diff != "" {
		t.Errorf("ready pods (-want +got):\n%s", diff)
	}
}

// registry is an image service that holds the images of present and can
// pull those of pullable, once each.
type registry struct {
	runtimeapi.UnimplementedImageServiceServer
	mu       sync.Mutex
	present  []string
	pullable []string
	pulls    []string
}

func (r *registry) ImageStatus(_ context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ref := req.GetImage().GetImage(); slices.Contains(r.present, ref) {
		return &runtimeapi.ImageStatusResponse{Image: &runtimeapi.Image{Id: "id-" + ref}}, nil
	}
	return &runtimeapi.ImageStatusResponse{}, nil
}

func (r *registry) PullImage(_ context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ref := req.GetImage().GetImage()
	r.pulls = append(r.pulls, ref)
	if !slices.Contains(r.pullable, ref) {
		return nil, status.Errorf(codes.NotFound, "image %q: no registry holds it", ref)
	}
	r.present = append(r.present, ref)
	return &runtimeapi.PullImageResponse{ImageRef: "id-" + ref}, nil
}

// infos records what is reported.
type infos []string

func (i *infos) Infof(format string, args ...any) { *i = append(*i, fmt.Sprintf(format, args...)) }

// TestPullMissing: every image the runtime lacks is pulled, in order,
// each image reported; at the first that cannot be pulled, what was done
// before comes back with the error.
func TestPullMissing(t *testing.T) {
	reg := &registry{present: []string{"a:1"}, pullable: []string{"b:1", "d:1"}}
	sock := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer()
	runtimeapi.RegisterImageServiceServer(server, reg)
	go func() { _ = server.Serve(l) }()
	defer server.Stop()
	images, err := cri.Dial("unix://"+sock, identity)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = images.Close() }()

	var reported infos
	res, err := images.PullMissing(t.Context(), []string{"a:1", "b:1"}, &reported)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cri.PullResult{Pulled: []string{"b:1"}, Present: []string{"a:1"}}, res); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(infos{"a:1: present", "b:1: pulled (id-b:1)"}, reported); diff != "" {
		t.Errorf("reported (-want +got):\n%s", diff)
	}

	reported = nil
	res, err = images.PullMissing(t.Context(), []string{"a:1", "b:1", "c:1", "d:1"}, &reported)
	if err == nil || !strings.Contains(err.Error(), `pull image "c:1"`) {
		t.Errorf("pulling an image the runtime cannot get: %v", err)
	}
	if diff := cmp.Diff(cri.PullResult{Pulled: []string{}, Present: []string{"a:1", "b:1"}}, res); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"b:1", "c:1"}, reg.pulls); diff != "" {
		t.Errorf("pulls (-want +got):\n%s", diff)
	}

	res, err = images.PullMissing(t.Context(), nil, &reported)
	if err != nil || res.Pulled == nil || res.Present == nil {
		t.Errorf("no images: %#v, %v", res, err)
	}
}
