package templates

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/inputfile"
)

// The patch types, as they appear after the '+' in a patch file name.
const (
	// PatchStrategic is a strategic merge patch, the default: lists such
	// as containers and volumes merge by name.
	PatchStrategic = "strategic"
	// PatchMerge is a JSON merge patch (RFC 7396): lists are replaced.
	PatchMerge = "merge"
	// PatchJSON is a JSON patch (RFC 6902): a list of operations.
	PatchJSON = "json"
)

var patchTypes = []string{PatchJSON, PatchMerge, PatchStrategic}

// Patch is one patch file. The phases read the patch directory; the
// templates package only needs names and bytes.
type Patch struct {
	// File is the file's path; its base name selects the component and the
	// patch type, and errors name it.
	File string
	// Data holds one or more patches of the file's type, in YAML or JSON;
	// several YAML documents are applied in order.
	Data []byte
}

// ParsePatchFileName splits a patch file's base name, in kubeadm's form
// target[suffix][+patchtype].extension, into the component it patches and
// the patch type. The target is a component name; the optional suffix,
// which may not contain '.' or '+', orders several files for one component;
// the type is json, merge or strategic (the default); the extension is
// .yaml or .json. For example kube-apiserver0+merge.yaml patches
// kube-apiserver with a JSON merge patch. Unlike kubeadm, which skips the
// files it does not understand, kubeboot rejects them.
func ParsePatchFileName(name string) (component, patchType string, err error) {
	stem, ok := strings.CutSuffix(name, ".yaml")
	if !ok {
		if stem, ok = strings.CutSuffix(name, ".json"); !ok {
			return "", "", fmt.Errorf("parse patch file name %q: the extension must be .yaml or .json", name)
		}
	}
	target, patchType, typed := strings.Cut(stem, "+")
	if !typed {
		patchType = PatchStrategic
	} else if !slices.Contains(patchTypes, patchType) {
		return "", "", fmt.Errorf("parse patch file name %q: unknown patch type %q after '+', want one of %s", name, patchType, strings.Join(patchTypes, ", "))
	}
	for _, component := range config.StaticPodNames {
		suffix, ok := strings.CutPrefix(target, component)
		if ok && !strings.Contains(suffix, ".") {
			return component, patchType, nil
		}
	}
	return "", "", fmt.Errorf("parse patch file name %q: unknown target %q, want a static pod's name (%s) and an optional suffix without '.'", name, target, strings.Join(config.StaticPodNames, ", "))
}

// ApplyPatches returns a copy of component's pod with the patches that
// target it applied, in the order of their base file names (then paths), so
// kube-apiserver0.yaml applies before kube-apiserver1.yaml whatever order
// the caller read them in. Every patch's name is checked, including those of
// patches for other components. The phases apply patches after building the
// pods and before validating them. Each result must still be a v1 Pod that
// decodes strictly: an unknown or misspelt field is an error naming the
// file, rather than something the kubelet would silently drop.
func ApplyPatches(component string, pod *corev1.Pod, patches []Patch) (*corev1.Pod, error) {
	if !slices.Contains(config.StaticPodNames, component) {
		return nil, fmt.Errorf("apply patches to %q: unknown static pod, want one of %s", component, strings.Join(config.StaticPodNames, ", "))
	}
	sorted := slices.Clone(patches)
	slices.SortStableFunc(sorted, func(a, b Patch) int {
		if c := strings.Compare(filepath.Base(a.File), filepath.Base(b.File)); c != 0 {
			return c
		}
		return strings.Compare(a.File, b.File)
	})
	// The pod is marshalled only once a patch targets it: most nodes have
	// none, and a node's pods took 4× longer to pass through with their
	// JSON made anyway (BenchmarkApplyPatchesNone).
	var data []byte
	patched := pod.DeepCopy()
	for _, p := range sorted {
		target, patchType, err := ParsePatchFileName(filepath.Base(p.File))
		if err != nil {
			return nil, fmt.Errorf("apply patch %q: %w", p.File, err)
		}
		if target != component {
			continue
		}
		if data == nil {
			if data, err = json.Marshal(pod); err != nil {
				return nil, fmt.Errorf("apply patches to %q: %w", component, err)
			}
		}
		if data, err = applyPatchFile(data, patchType, p.Data); err != nil {
			return nil, fmt.Errorf("apply patch %q to %s: %w", p.File, component, err)
		}
		if patched, err = decodePod(data); err != nil {
			return nil, fmt.Errorf("apply patch %q to %s: %w", p.File, component, err)
		}
	}
	return patched, nil
}

// applyPatchFile applies every document of one patch file to the JSON pod.
func applyPatchFile(pod []byte, patchType string, file []byte) ([]byte, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(file)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return pod, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read patch: %w", err)
		}
		// Strict conversion rejects duplicate keys, a likely typo.
		patch, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			return nil, fmt.Errorf("read patch: %w", err)
		}
		// An empty or comment-only document means no patch; as a merge
		// patch, its null would replace the whole pod.
		if bytes.Equal(bytes.TrimSpace(patch), []byte("null")) {
			continue
		}
		if pod, err = applyPatch(pod, patchType, patch); err != nil {
			return nil, err
		}
	}
}

// applyPatch applies one JSON patch of patchType to the JSON pod.
func applyPatch(pod []byte, patchType string, patch []byte) ([]byte, error) {
	var patched []byte
	var err error
	switch patchType {
	case PatchJSON:
		ops, decodeErr := jsonpatch.DecodePatch(patch)
		if decodeErr != nil {
			return nil, fmt.Errorf("decode json patch: %w", decodeErr)
		}
		patched, err = applyOperations(pod, ops)
	case PatchMerge:
		patched, err = jsonpatch.MergePatch(pod, patch)
	default:
		patched, err = strategicpatch.StrategicMergePatch(pod, patch, corev1.Pod{})
	}
	if err != nil {
		return nil, fmt.Errorf("apply %s patch: %w", patchType, err)
	}
	return patched, nil
}

// applyOperations applies a JSON patch one operation at a time, checking
// the pod's size after each: a few dozen copy operations, each doubling the
// pod, would otherwise exhaust memory before any error. A pod larger than
// the kubelet's limit on a manifest could never run anyway.
func applyOperations(pod []byte, ops jsonpatch.Patch) ([]byte, error) {
	for i, op := range ops {
		var err error
		if pod, err = (jsonpatch.Patch{op}).Apply(pod); err != nil {
			return nil, fmt.Errorf("operation %d: %w", i, err)
		}
		if len(pod) > inputfile.ManifestLimit {
			return nil, fmt.Errorf("operation %d: the pod grows past %d bytes, the kubelet's limit on a manifest", i, inputfile.ManifestLimit)
		}
	}
	return pod, nil
}

// decodePod decodes a patched pod strictly: unknown fields, duplicate
// fields and wrongly cased field names are errors, and it must remain a v1
// Pod.
func decodePod(data []byte) (*corev1.Pod, error) {
	var pod corev1.Pod
	strict, err := sigsjson.UnmarshalStrict(data, &pod, sigsjson.DisallowUnknownFields, sigsjson.DisallowDuplicateFields)
	if err != nil {
		return nil, fmt.Errorf("decode patched pod: %w", err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("decode patched pod: %w", errors.Join(strict...))
	}
	if pod.APIVersion != "v1" || pod.Kind != "Pod" {
		return nil, fmt.Errorf("decode patched pod: it is now apiVersion %q kind %q, want v1 Pod", pod.APIVersion, pod.Kind)
	}
	return &pod, nil
}
