package lab

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// sandboxImageName is the binary name of the pause image. Sandboxes run no
// process, so it needs no binary.
const sandboxImageName = "pause"

// sandboxImageID is the pause image's ID. It is a fixed digest because there
// is no file to hash.
var sandboxImageID = func() string {
	sum := sha256.Sum256([]byte(RuntimeName + " sandbox image"))
	return "sha256:" + hex.EncodeToString(sum[:])
}()

// image is an image reference resolved to a binary.
type image struct {
	name string // binary name, e.g. "kube-apiserver"
	path string // absolute path; empty for the sandbox image
	id   string // "sha256:<hex of the binary>"
	size uint64
}

// imageStore resolves image references to binaries and remembers their
// digests: hashing kube-apiserver takes a while, and the kubelet asks for
// image status on every pod sync.
type imageStore struct {
	binDir string

	mu      sync.Mutex
	digests map[string]digest   // by binary path
	refs    map[string][]string // image references asked for, by binary name
}

// digest is a cached hash, valid while the file keeps its mtime and size.
type digest struct {
	modTime time.Time
	size    int64
	id      string
}

func newImageStore(binDir string) *imageStore {
	return &imageStore{binDir: binDir, digests: map[string]digest{}, refs: map[string][]string{}}
}

// binaryName maps an image reference to a binary name: the last path element
// of the repository, without tag or digest.
// "registry.k8s.io/kube-apiserver:v1.36.3" -> "kube-apiserver".
func binaryName(ref string) (string, error) {
	name, _, _ := strings.Cut(ref, "@")
	name = name[strings.LastIndex(name, "/")+1:]
	name, _, _ = strings.Cut(name, ":")
	if name == "" || name == "." || name == ".." {
		return "", invalid("image %q: no repository name to map to a binary", ref)
	}
	return name, nil
}

// resolve finds the binary for an image spec. The kubelet creates containers
// with the image ID it got from PullImage or ImageStatus, and passes the
// name the pod asked for as UserSpecifiedImage, so IDs are resolved by that
// name when possible and by hashing the bin dir otherwise.
func (s *imageStore) resolve(spec *runtimeapi.ImageSpec) (image, error) {
	ref := spec.GetImage()
	if !strings.HasPrefix(ref, "sha256:") {
		return s.byName(ref)
	}
	if ref == sandboxImageID {
		return image{name: sandboxImageName, id: sandboxImageID}, nil
	}
	if user := spec.GetUserSpecifiedImage(); user != "" {
		if img, err := s.byName(user); err == nil && img.id == ref {
			return img, nil
		}
	}
	imgs, err := s.list()
	if err != nil {
		return image{}, err
	}
	for _, img := range imgs {
		if img.id == ref {
			return img, nil
		}
	}
	return image{}, status.Errorf(codes.NotFound, "image %q: no binary in bin dir %q has this digest", ref, s.binDir)
}

// byName resolves an image reference by its binary name.
func (s *imageStore) byName(ref string) (image, error) {
	name, err := binaryName(ref)
	if err != nil {
		return image{}, err
	}
	if name == sandboxImageName {
		return image{name: name, id: sandboxImageID}, nil
	}
	// A minor version's own binaries, such as <bin dir>/v1.35/kube-apiserver,
	// come first, so a lab can run one version and upgrade to another.
	if dir := tagDir(ref); dir != "" {
		if img, err := s.binary(filepath.Join(dir, name)); err == nil {
			img.name = name
			return img, nil
		}
	}
	img, err := s.binary(name)
	if os.IsNotExist(err) {
		return image{}, status.Errorf(codes.NotFound, "image %q: no binary %q in bin dir %q", ref, name, s.binDir)
	}
	return img, err
}

// tagDir is the bin dir subdirectory of an image's minor version:
// "registry.k8s.io/kube-apiserver:v1.35.4" -> "v1.35"; "" when the tag is
// not a vMAJOR.MINOR... version (etcd's "3.6.8-0", a digest, no tag).
func tagDir(ref string) string {
	name, _, _ := strings.Cut(ref, "@")
	name = name[strings.LastIndex(name, "/")+1:]
	_, tag, ok := strings.Cut(name, ":")
	if !ok || !strings.HasPrefix(tag, "v") {
		return ""
	}
	parts := strings.SplitN(tag[1:], ".", 3)
	if len(parts) < 2 || !allDigits(parts[0]) || !allDigits(parts[1]) {
		return ""
	}
	return "v" + parts[0] + "." + parts[1]
}

func allDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// binary describes the executable binDir/name, hashing it if its cached
// digest is stale.
func (s *imageStore) binary(name string) (image, error) {
	path := filepath.Join(s.binDir, name)
	fi, err := os.Stat(path) // follows symlinks: a symlinked binary is fine
	if err != nil {
		return image{}, err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return image{}, invalid("image binary %q: not an executable file", path)
	}
	s.mu.Lock()
	d, ok := s.digests[path]
	s.mu.Unlock()
	if !ok || !d.modTime.Equal(fi.ModTime()) || d.size != fi.Size() {
		id, err := hashFile(path)
		if err != nil {
			return image{}, err
		}
		d = digest{modTime: fi.ModTime(), size: fi.Size(), id: id}
		s.mu.Lock()
		s.digests[path] = d
		s.mu.Unlock()
	}
	return image{name: name, path: path, id: d.id, size: uint64(fi.Size())}, nil
}

func hashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("hash image binary %q: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash image binary %q: %w", path, err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// list describes every executable in the bin dir, sorted by name.
func (s *imageStore) list() ([]image, error) {
	entries, err := os.ReadDir(s.binDir)
	if err != nil {
		return nil, fmt.Errorf("list bin dir %q: %w", s.binDir, err)
	}
	var imgs []image
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		img, err := s.binary(e.Name())
		if err != nil {
			continue // not an executable file (or gone since ReadDir): not an image
		}
		imgs = append(imgs, img)
	}
	return imgs, nil
}

// remember records the reference an image was asked for by, so that
// ListImages can show the names the kubelet and users know it by.
func (s *imageStore) remember(img image, ref string) {
	if strings.HasPrefix(ref, "sha256:") {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.refs[img.name] {
		if r == ref {
			return
		}
	}
	s.refs[img.name] = append(s.refs[img.name], ref)
	sort.Strings(s.refs[img.name])
}

// toCRI describes img. Every image is pinned: images are binaries managed
// outside the runtime, so the kubelet's image garbage collector must leave
// them alone.
func (s *imageStore) toCRI(img image) *runtimeapi.Image {
	s.mu.Lock()
	tags := append([]string(nil), s.refs[img.name]...)
	s.mu.Unlock()
	return &runtimeapi.Image{
		Id:       img.id,
		RepoTags: tags,
		Size:     img.size,
		Spec:     &runtimeapi.ImageSpec{Image: img.id},
		Pinned:   true,
	}
}

// imageService implements the CRI ImageService on the bin dir.
type imageService struct {
	runtimeapi.UnimplementedImageServiceServer
	*Runtime
}

// ListImages lists the binaries in the bin dir.
func (s imageService) ListImages(_ context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	imgs, err := s.images.list()
	if err != nil {
		return nil, err
	}
	var want string
	if ref := req.GetFilter().GetImage().GetImage(); ref != "" {
		img, err := s.images.resolve(req.GetFilter().GetImage())
		if err != nil {
			return &runtimeapi.ListImagesResponse{}, nil
		}
		want = img.id
	}
	resp := &runtimeapi.ListImagesResponse{}
	for _, img := range imgs {
		if want == "" || img.id == want {
			resp.Images = append(resp.Images, s.images.toCRI(img))
		}
	}
	return resp, nil
}

// ImageStatus describes an image, or returns no image (not an error) when
// its binary is missing: that is how the kubelet learns it must pull.
func (s imageService) ImageStatus(_ context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	img, err := s.images.resolve(req.GetImage())
	if status.Code(err) == codes.NotFound {
		return &runtimeapi.ImageStatusResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	s.images.remember(img, req.GetImage().GetImage())
	return &runtimeapi.ImageStatusResponse{Image: s.images.toCRI(img)}, nil
}

// PullImage only checks that the image's binary exists: there is nothing to
// download.
func (s imageService) PullImage(_ context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	ref := req.GetImage().GetImage()
	img, err := s.images.resolve(req.GetImage())
	if err != nil {
		return nil, fmt.Errorf("pull image %q: %w", ref, err)
	}
	s.images.remember(img, ref)
	return &runtimeapi.PullImageResponse{ImageRef: img.id}, nil
}

// RemoveImage refuses: images are binaries the runtime does not own.
func (s imageService) RemoveImage(_ context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	return nil, wrongState("remove image %q: images are the binaries in %q; the lab runtime never deletes them", req.GetImage().GetImage(), s.binDir)
}

// ImageFsInfo reports the bin dir as the image and container filesystem.
// The kubelet asks the host for the capacity of that mountpoint, so it must
// be a real directory; reporting one filesystem for both keeps the kubelet
// out of its split-filesystem mode.
func (s imageService) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	imgs, err := s.images.list()
	if err != nil {
		return nil, err
	}
	var used uint64
	for _, img := range imgs {
		used += img.size
	}
	usage := &runtimeapi.FilesystemUsage{
		Timestamp:  time.Now().UnixNano(),
		FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: s.binDir},
		UsedBytes:  &runtimeapi.UInt64Value{Value: used},
		InodesUsed: &runtimeapi.UInt64Value{Value: uint64(len(imgs))},
	}
	return &runtimeapi.ImageFsInfoResponse{
		ImageFilesystems:     []*runtimeapi.FilesystemUsage{usage},
		ContainerFilesystems: []*runtimeapi.FilesystemUsage{usage},
	}, nil
}
