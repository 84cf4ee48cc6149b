package cri_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kubeboot/kubeboot/cri"
)

// startingPod is a runtime with one pod whose container the kubelet was
// starting when it stopped: the runtime refuses to remove the pod twice,
// as containerd does while a container is in its starting state.
type startingPod struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	refusals atomic.Int32
	removed  atomic.Bool
}

func (s *startingPod) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	if s.removed.Load() {
		return &runtimeapi.ListPodSandboxResponse{}, nil
	}
	return &runtimeapi.ListPodSandboxResponse{Items: []*runtimeapi.PodSandbox{{Id: "p1", Metadata: &runtimeapi.PodSandboxMetadata{Name: "kube-scheduler-n1"}}}}, nil
}

func (s *startingPod) StopPodSandbox(context.Context, *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

func (s *startingPod) RemovePodSandbox(context.Context, *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	if s.refusals.Add(1) <= 2 {
		return nil, errors.New(`failed to set removing state for container "c1": container is in starting state, can't be removed`)
	}
	s.removed.Store(true)
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

// TestRemovePodsRetries: a pod the runtime refuses to remove for a moment
// is removed once it may be.
func TestRemovePodsRetries(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	runtime := &startingPod{}
	server := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(server, runtime)
	go func() { _ = server.Serve(l) }()
	defer server.Stop()
	client, err := cri.Dial("unix://"+sock, identity)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := client.RemovePods(ctx)
	if err != nil || n != 1 || !runtime.removed.Load() {
		t.Fatalf("RemovePods: %d pods, %v; removed %v", n, err, runtime.removed.Load())
	}
	if got := runtime.refusals.Load(); got != 3 {
		t.Errorf("%d removal attempts, want 3 (two refused)", got)
	}
}
