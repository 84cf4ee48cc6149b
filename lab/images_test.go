package lab_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func fileID(t *testing.T, path string) (string, uint64) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:]), uint64(len(data))
}

func TestImages(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	shID, shSize := fileID(t, filepath.Join(e.binDir, "sh"))
	sleepID, _ := fileID(t, filepath.Join(e.binDir, "sleep"))
	const shRef = "registry.k8s.io/sh:1"

	pulled, err := e.is.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: shRef}})
	if err != nil {
		t.Fatal(err)
	}
	if pulled.ImageRef != shID {
		t.Errorf("PullImage ref = %s, want the binary's digest %s", pulled.ImageRef, shID)
	}

	// The kubelet asks by name before pulling, and by ID afterwards.
	for _, ref := range []string{shRef, "example.com:5000/tools/sh@sha256:0123", shID} {
		st, err := e.is.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		if err != nil {
			t.Fatal(err)
		}
		img := st.GetImage()
		if img.GetId() != shID || img.GetSize() != shSize || !img.GetPinned() {
			t.Errorf("ImageStatus(%s) = %v, want id %s size %d pinned", ref, img, shID, shSize)
		}
	}

	// A missing binary is "no image" for ImageStatus, so that the kubelet pulls.
	st, err := e.is.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: "registry.k8s.io/etcd:3.6.8-0"}})
	if err != nil || st.Image != nil {
		t.Errorf("ImageStatus of a missing binary = %v, %v; want no image and no error", st, err)
	}

	list, err := e.is.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]*runtimeapi.Image{}
	for _, img := range list.Images {
		ids[img.Id] = img
	}
	if len(list.Images) != 2 || ids[shID] == nil || ids[sleepID] == nil {
		t.Fatalf("ListImages = %v, want sh and sleep", list.Images)
	}
	if tags := ids[shID].RepoTags; len(tags) != 2 || tags[0] != "example.com:5000/tools/sh@sha256:0123" || tags[1] != shRef {
		t.Errorf("sh repo tags = %v, want the references it was asked by", tags)
	}
	filtered, err := e.is.ListImages(ctx, &runtimeapi.ListImagesRequest{Filter: &runtimeapi.ImageFilter{Image: &runtimeapi.ImageSpec{Image: "x/sleep:2"}}})
	if err != nil || len(filtered.Images) != 1 || filtered.Images[0].Id != sleepID {
		t.Errorf("ListImages filtered by sleep = %v, %v", filtered.GetImages(), err)
	}

	// The sandbox image needs no binary.
	pause, err := e.is.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "registry.k8s.io/pause:3.10"}})
	if err != nil || pause.ImageRef == "" {
		t.Errorf("PullImage pause = %v, %v", pause, err)
	}

	_, err = e.is.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: shRef}})
	wantCode(t, err, codes.FailedPrecondition, "never deletes")
	if _, err := os.Stat(filepath.Join(e.binDir, "sh")); err != nil {
		t.Errorf("RemoveImage touched the binary: %v", err)
	}
}

func TestPullMissingBinary(t *testing.T) {
	e := newEnv(t)
	_, err := e.is.PullImage(context.Background(), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "registry.k8s.io/kube-apiserver:v1.36.3"}})
	wantCode(t, err, codes.NotFound, `"kube-apiserver"`, e.binDir)

	_, err = e.is.PullImage(context.Background(), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "registry.k8s.io/"}})
	wantCode(t, err, codes.InvalidArgument, "no repository name")
}

func TestImageFsInfo(t *testing.T) {
	e := newEnv(t)
	resp, err := e.is.ImageFsInfo(context.Background(), &runtimeapi.ImageFsInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, shSize := fileID(t, filepath.Join(e.binDir, "sh"))
	_, sleepSize := fileID(t, filepath.Join(e.binDir, "sleep"))
	for _, fss := range [][]*runtimeapi.FilesystemUsage{resp.ImageFilesystems, resp.ContainerFilesystems} {
		// The kubelet dereferences UsedBytes and asks the host about the mountpoint.
		if len(fss) != 1 || fss[0].GetFsId().GetMountpoint() != e.binDir || fss[0].GetUsedBytes() == nil ||
			fss[0].GetUsedBytes().GetValue() != shSize+sleepSize || fss[0].GetInodesUsed().GetValue() != 2 || fss[0].GetTimestamp() == 0 {
			t.Errorf("filesystems = %v, want the bin dir with %d bytes in 2 files", fss, shSize+sleepSize)
		}
	}
}
