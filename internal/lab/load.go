package lab

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/kubeboot/kubeboot/internal/inputfile"
)

const (
	// archiveLimit caps an image archive, which is streamed, never held in
	// memory: the largest images in use (CUDA and ML frameworks) save to
	// 10 to 20 GiB, so 64 GiB only refuses a disk image by mistake.
	archiveLimit = 64 << 30
	// indexLimit caps an archive's manifest.json or index.json, which is
	// decoded whole: each image takes a few hundred bytes there (its
	// tags, config and layers), so 4 MiB holds thousands of images and
	// keeps the decoder's memory small.
	indexLimit = 4 << 20
)

// Loaded is what Load put into one node: the references of the images its
// containerd imported.
type Loaded struct {
	Node   string   `json:"node"`
	Images []string `json:"images"`
}

// Load puts image archives (`docker save`'s or OCI image layouts as tar
// files) into the containerd of the named nodes (every node when nodes is
// empty), all nodes at once, where pods can run them at once, as kind's
// `load image-archive` does. Every archive and node name is checked before
// any node is touched (CheckLoad): an archive that is neither format, or a
// node not in the lab, is refused naming it. A user's archive is no
// kubeboot image bundle (`docker save` writes none), so it is streamed into
// `ctr images import`, which takes both formats, and not into the
// `kubeboot images import` that loads the lab's own archive.
func (l Lab) Load(ctx context.Context, archives, nodes []string) ([]Loaded, error) {
	if err := l.CheckLoad(archives, nodes); err != nil {
		return nil, err
	}
	if len(nodes) == 0 {
		for _, n := range l.Cluster.Nodes {
			nodes = append(nodes, n.Name)
		}
	}
	loaded := make([]Loaded, len(nodes))
	errs := make([]error, len(nodes))
	for i, name := range nodes {
		loaded[i].Node = name
	}
	refs := make([][]string, len(archives))
	for i, a := range archives {
		refs[i], _ = archiveRefs(a) // checked above
	}
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Go(func() {
			m, _ := l.Machine(nodes[i])
			for j, a := range archives {
				if err := importArchive(ctx, m.Run, a, refs[j]); err != nil {
					errs[i] = fmt.Errorf("load %s into %s: %w", a, nodes[i], err)
					return
				}
				loaded[i].Images = append(loaded[i].Images, refs[j]...)
			}
		})
	}
	wg.Wait()
	return loaded, errors.Join(errs...)
}

// CheckLoad is Load's check of its input: at least one archive, each a
// tar file of `docker save`'s or an OCI layout that names its images, and
// every node in the lab.
func (l Lab) CheckLoad(archives, nodes []string) error {
	if len(archives) == 0 {
		return errors.New("no image archive given: name one or more `docker save` or OCI archives")
	}
	for _, a := range archives {
		if _, err := archiveRefs(a); err != nil {
			return err
		}
	}
	for _, name := range nodes {
		if _, err := l.Machine(name); err != nil {
			return err
		}
	}
	return nil
}

// openArchive opens the image archive at path: a regular file of at most
// archiveLimit bytes. Anything else, a FIFO (as bash's <(docker save ...)
// gives) among them, is refused without waiting on it: Load reads an
// archive more than once, for its index, then for each node's import.
func openArchive(path string) (*os.File, error) {
	f, err := inputfile.Open(path, archiveLimit)
	switch {
	case errors.Is(err, inputfile.ErrNotRegular):
		return nil, fmt.Errorf("image archive: %w: lab load reads an archive more than once, so save it to a file first (`docker save -o app.tar IMAGE`) and name that file", err)
	case err != nil:
		return nil, fmt.Errorf("image archive: %w", err)
	}
	return f, nil
}

// archiveRefs opens a tar file, wants the index of one of the two formats
// containerd imports, manifest.json (`docker save`) or index.json (an OCI
// image layout), of at most indexLimit bytes, and returns the image
// references it names: the RepoTags, or the manifests'
// io.containerd.image.name annotations.
func archiveRefs(path string) ([]string, error) {
	f, err := openArchive(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	const fix = "write it with `docker save`, `podman save` or `crane pull --format=oci`"
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("image archive %s holds neither manifest.json nor index.json: %s", path, fix)
		}
		if err != nil {
			return nil, fmt.Errorf("image archive %s is no tar file (%w): %s", path, err, fix)
		}
		name := strings.TrimPrefix(h.Name, "./")
		if name != "manifest.json" && name != "index.json" {
			continue
		}
		if h.Size > indexLimit {
			return nil, fmt.Errorf("image archive %s: its %s has %d bytes, more than the %d MiB an index of thousands of images takes: it is no index `docker save`, `podman save` or `crane pull --format=oci` writes", path, name, h.Size, indexLimit>>20)
		}
		data, err := io.ReadAll(io.LimitReader(tr, indexLimit))
		if err != nil {
			return nil, fmt.Errorf("image archive %s is no tar file (%w): %s", path, err, fix)
		}
		var refs []string
		switch name {
		case "manifest.json":
			var manifest []struct{ RepoTags []string }
			if err := json.Unmarshal(data, &manifest); err != nil {
				return nil, fmt.Errorf("image archive %s: manifest.json: %w", path, err)
			}
			for _, m := range manifest {
				refs = append(refs, m.RepoTags...)
			}
		case "index.json":
			var index struct {
				Manifests []struct{ Annotations map[string]string }
			}
			if err := json.Unmarshal(data, &index); err != nil {
				return nil, fmt.Errorf("image archive %s: index.json: %w", path, err)
			}
			for _, m := range index.Manifests {
				if ref := m.Annotations["io.containerd.image.name"]; ref != "" {
					refs = append(refs, ref)
				}
			}
		}
		if len(refs) == 0 {
			return nil, fmt.Errorf("image archive %s names no image: tag what you save (`docker save -o %s NAME:TAG`)", path, filepath.Base(path))
		}
		slices.Sort(refs)
		return slices.Compact(refs), nil
	}
}

// runner runs argv with the given streams: a machine's Run.
type runner func(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, argv ...string) error

// importArchive streams the archive, at most archiveLimit bytes of it,
// into `ctr images import` in the node, in the namespace the kubelet's CRI
// uses, then wants every reference the archive names among the node's
// images.
func importArchive(ctx context.Context, run runner, path string, refs []string) error {
	f, err := openArchive(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	var out strings.Builder
	if err := run(ctx, io.LimitReader(f, archiveLimit), &out, &out, "ctr", "-n", "k8s.io", "images", "import", "-"); err != nil {
		return fmt.Errorf("ctr images import: %w: %s", err, strings.TrimSpace(out.String()))
	}
	var listed strings.Builder
	if err := run(ctx, nil, &listed, &listed, "ctr", "-n", "k8s.io", "images", "ls", "-q"); err != nil {
		return fmt.Errorf("ctr images ls: %w: %s", err, strings.TrimSpace(listed.String()))
	}
	have := strings.Fields(listed.String())
	for _, ref := range refs {
		if !slices.Contains(have, ref) {
			return fmt.Errorf("ctr images import left no image %s: %s", ref, strings.TrimSpace(out.String()))
		}
	}
	return nil
}
