package cri_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kubeboot/kubeboot/cri"
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
