package lab

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Loaded is what Load put into one node: the references of the images its
// containerd imported.
type Loaded struct {
	Node   string
	Images []string
}

// Load puts image archives (`docker save`'s or OCI image layouts as tar
// files) into the containerd of the named nodes (every node when nodes is
// empty), all nodes at once, where pods can run them at once, as kind's
// `load image-archive` does. Every archive and node name is checked before
// any node is touched (CheckLoad): an archive that is neither format, or a
// node not in the lab, is refused naming it.
func (l MachineLab) Load(ctx context.Context, archives, nodes []string) ([]Loaded, error) {
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
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Go(func() {
			m, _ := l.Machine(nodes[i])
			for _, a := range archives {
				refs, err := importArchive(ctx, m.Run, a)
				if err != nil {
					errs[i] = fmt.Errorf("load %s into %s: %w", a, nodes[i], err)
					return
				}
				loaded[i].Images = append(loaded[i].Images, refs...)
			}
		})
	}
	wg.Wait()
	return loaded, errors.Join(errs...)
}

// CheckLoad is Load's check of its input: at least one archive, each a
// tar file of `docker save`'s or an OCI layout, and every node in the lab.
func (l MachineLab) CheckLoad(archives, nodes []string) error {
	if len(archives) == 0 {
		return errors.New("no image archive given: name one or more `docker save` or OCI archives")
	}
	for _, a := range archives {
		if err := checkArchive(a); err != nil {
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

// checkArchive opens a tar file and wants the index of one of the two
// formats containerd imports: manifest.json (`docker save`) or index.json
// (an OCI image layout).
func checkArchive(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("image archive: %w", err)
	}
	defer func() { _ = f.Close() }()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("image archive %s holds neither manifest.json nor index.json: write it with `docker save`, `podman save` or `crane pull --format=oci`", path)
		}
		if err != nil {
			return fmt.Errorf("image archive %s is no tar file (%w): write it with `docker save`, `podman save` or `crane pull --format=oci`", path, err)
		}
		if name := strings.TrimPrefix(h.Name, "./"); name == "manifest.json" || name == "index.json" {
			return nil
		}
	}
}

// importedRef is a line of `ctr images import`'s output that names an
// image it imported: "REF<spaces and tabs>saved".
var importedRef = regexp.MustCompile(`(?m)^(\S+)\s+saved\s*$`)

// runner runs argv with the given streams: a machine's Run.
type runner func(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, argv ...string) error

// importArchive streams the archive into `ctr images import` in the node,
// in the namespace the kubelet's CRI uses, and returns the references it
// imported.
func importArchive(ctx context.Context, run runner, path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var out strings.Builder
	if err := run(ctx, f, &out, &out, "ctr", "-n", "k8s.io", "images", "import", "-"); err != nil {
		return nil, fmt.Errorf("ctr images import: %w: %s", err, strings.TrimSpace(out.String()))
	}
	var refs []string
	for _, m := range importedRef.FindAllStringSubmatch(out.String(), -1) {
		refs = append(refs, m[1])
	}
	slices.Sort(refs)
	return slices.Compact(refs), nil
}
