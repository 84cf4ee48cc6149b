// Package imagebundle is kubeboot's air-gap image bundle: the images a
// node needs in one tar file that a node without a registry loads into its
// containerd. A bundle is an OCI image layout in a tar (oci-layout,
// index.json, blobs/sha256/<hex>), its members sorted and dated alike so
// that the same images always give the same bytes. Its index lists one
// single-platform image manifest per reference, annotated with the
// reference as containerd names images (io.containerd.image.name) and its
// tag (org.opencontainers.image.ref.name), so that `ctr images import`
// takes it too.
//
// Export reads the images from a registry or from the local containerd's
// content store (ExportFile writes them to a file), and WriteImages writes
// images its caller holds in memory as go-containerregistry's v1.Image
// (the lab's, built from binaries) in the same format. Open verifies a
// bundle whole, every member's name and every blob's digest and size,
// before Import loads it into a containerd and unpacks it into that
// containerd's default snapshotter, where the CRI, and so the kubelet,
// finds it.
package imagebundle

import (
	"fmt"
	"runtime"
	"strings"

	"github.com/containerd/platforms"
	"github.com/distribution/reference"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/kubeboot/kubeboot/internal/exit"
)

// The names of a bundle's members and the annotations of its index.
const (
	// layoutFile is the OCI layout's marker, oci-layout.
	layoutFile = ocispec.ImageLayoutFile
	// indexFile is the OCI layout's index, index.json.
	indexFile = ocispec.ImageIndexFile
	// blobDir holds the blobs, each named by its sha256 digest's hex.
	blobDir = ocispec.ImageBlobsDir + "/sha256/"
	// AnnotationImageName is the annotation of an index entry that names
	// the image as containerd does: its full reference.
	AnnotationImageName = "io.containerd.image.name"
)

// Namespace is the containerd namespace of the images the kubelet's CRI
// runs, where Import loads them and the runtime source of export reads them.
const Namespace = "k8s.io"

// DefaultEndpoint is containerd's socket on a node, as a CRI endpoint URL.
const DefaultEndpoint = "unix:///run/containerd/containerd.sock"

// Image is one image of a bundle.
type Image struct {
	// Ref is its full reference, as containerd names it
	// (registry.k8s.io/pause:3.10.2, docker.io/library/busybox:1.37).
	Ref string `json:"ref"`
	// Digest is its manifest's digest.
	Digest string `json:"digest"`
	// Size is the bytes of its manifest, config and layers.
	Size int64 `json:"size"`
}

// DefaultPlatform is the node's own platform: linux on this binary's
// architecture.
func DefaultPlatform() string { return "linux/" + runtime.GOARCH }

// parsePlatform reads a --platform value, os/arch[/variant].
func parsePlatform(s string) (ocispec.Platform, error) {
	p, err := platforms.Parse(s)
	if err != nil || strings.Count(s, "/") < 1 {
		return ocispec.Platform{}, &exit.UsageError{Msg: fmt.Sprintf("--platform %q: want os/arch[/variant], such as %s", s, DefaultPlatform())}
	}
	return platforms.Normalize(p), nil
}

// normalize is ref's full reference as containerd names images: the
// registry and the tag made explicit (docker.io/library/busybox:latest).
func normalize(ref string) (string, error) {
	named, err := reference.ParseDockerRef(ref)
	if err != nil {
		return "", &exit.UsageError{Msg: fmt.Sprintf("image %q: not an image reference (%v): want registry/repository:tag or @sha256:digest", ref, err)}
	}
	return named.String(), nil
}

// tagOf is a full reference's tag, the index entry's
// org.opencontainers.image.ref.name, or "" for a reference by digest.
func tagOf(ref string) string {
	named, err := reference.ParseNormalizedNamed(ref)
	if tagged, ok := named.(reference.Tagged); err == nil && ok {
		return tagged.Tag()
	}
	return ""
}

// Missing returns the refs, in order, that images lacks.
func Missing(images []Image, refs []string) ([]string, error) {
	have := map[string]bool{}
	for _, img := range images {
		have[img.Ref] = true
	}
	var missing []string
	for _, ref := range refs {
		full, err := normalize(ref)
		if err != nil {
			return nil, err
		}
		if !have[full] {
			missing = append(missing, ref)
		}
	}
	return missing, nil
}
