package staticpod

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"

	yamlv2 "go.yaml.in/yaml/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/inputfile"
)

// maxManifestSize is the most the kubelet reads of one manifest file; it
// refuses larger files outright.
const maxManifestSize = 10 << 20

// decode turns a manifest into a v1 Pod the way the kubelet does, and
// reports every place where the kubelet would be silently lenient. It
// returns a nil pod when the kubelet could not decode a Pod from data; the
// findings then say why.
func decode(data []byte) (*corev1.Pod, []Finding) {
	if len(data) > maxManifestSize {
		return nil, []Finding{{Message: "larger than 10 MiB: the kubelet refuses to read it"}}
	}
	// Decoding costs memory per YAML node: refuse a manifest of millions
	// of tiny items before any parser builds them.
	if inputfile.YAMLNodes(data, inputfile.ManifestNodes) > inputfile.ManifestNodes {
		return nil, []Finding{{Message: "not decoded: " + inputfile.TooComplex(inputfile.ManifestNodes)}}
	}
	js, errs := toJSON(data)
	if js == nil {
		return nil, errs
	}
	if string(bytes.TrimSpace(js)) == "null" {
		return nil, append(errs, Finding{Message: "empty manifest: the kubelet cannot decode a pod from it"})
	}

	// Check the kind first, so that a PodList is reported as a PodList
	// rather than as a Pod with an unknown field "items".
	var typeMeta metav1.TypeMeta
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(js, &typeMeta); err != nil {
		return nil, append(errs, decodeError(data, err)...)
	}
	if kindErrs := checkKind(typeMeta); len(kindErrs) > 0 {
		return nil, append(errs, kindErrs...)
	}

	var pod corev1.Pod
	strictErrs, err := sigsjson.UnmarshalStrict(js, &pod)
	if err != nil {
		return nil, append(errs, decodeError(data, err)...)
	}
	for _, e := range strictErrs {
		errs = append(errs, strictFinding(e))
	}
	return &pod, errs
}

// toJSON converts a manifest to JSON as the kubelet does: input that starts
// with "{" is taken as JSON as it is, anything else is YAML 1.1. It returns
// nil JSON when the kubelet could not parse the input at all.
func toJSON(data []byte) ([]byte, []Finding) {
	if utilyaml.IsJSONBuffer(data) {
		// A flow-style YAML mapping also starts with "{"; the kubelet
		// decodes it as JSON and fails, and so does this path.
		return data, nil
	}
	var errs []Finding
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		// The strict conversion only adds the duplicate-key check, so when
		// the lenient one (the kubelet's) succeeds, that is what failed.
		lenient, lenientErr := yaml.YAMLToJSON(data)
		if lenientErr != nil {
			return nil, []Finding{{Message: "parse YAML: " + oneLine(lenientErr)}}
		}
		errs = append(errs, Finding{Message: "duplicate mapping key, of which the kubelet silently keeps the last: " + oneLine(err)})
		js = lenient
	}
	if hasExtraDocument(data) {
		errs = append(errs, Finding{Message: "more than one YAML document: the kubelet silently runs only the first; put each pod in a file of its own"})
	}
	return js, errs
}

// hasExtraDocument reports whether a YAML stream holds a non-empty document
// after the first one.
func hasExtraDocument(data []byte) bool {
	// A second document can only start after a "---" or "..." marker; most
	// manifests have neither, and so skip a second parse.
	if !bytes.Contains(data, []byte("---")) && !bytes.Contains(data, []byte("...")) {
		return false
	}
	dec := yamlv2.NewDecoder(bytes.NewReader(data))
	var first any
	if dec.Decode(&first) != nil {
		return false // toJSON has reported the parse error
	}
	for {
		var doc any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return false
		}
		// A broken later document still is a later document, which the
		// kubelet ignores.
		if err != nil || doc != nil {
			return true
		}
	}
}

// checkKind accepts only apiVersion v1, kind Pod.
func checkKind(t metav1.TypeMeta) []Finding {
	var errs []Finding
	switch t.Kind {
	case "Pod":
	case "PodList":
		errs = append(errs, Finding{Field: "kind", Message: "PodList is not accepted: the kubelet reads exactly one Pod per file; put each pod in a file of its own"})
	case "":
		errs = append(errs, Finding{Field: "kind", Message: "required: must be Pod"})
	default:
		errs = append(errs, Finding{Field: "kind", Message: "unsupported value " + strconv.Quote(t.Kind) + ": must be Pod"})
	}
	switch t.APIVersion {
	case "v1":
	case "":
		errs = append(errs, Finding{Field: "apiVersion", Message: "required: must be v1"})
	default:
		errs = append(errs, Finding{Field: "apiVersion", Message: "unsupported value " + strconv.Quote(t.APIVersion) + ": must be v1"})
	}
	return errs
}

// decodeError explains why JSON decoding failed. The common cause in YAML
// is a bare scalar read as another type, such as yes/no/on/off/y/n read as
// a boolean; when that is the cause, the findings name each such scalar
// instead of the decoder's message.
func decodeError(data []byte, err error) []Finding {
	if !utilyaml.IsJSONBuffer(data) {
		if traps := yamlTraps(data); len(traps) > 0 {
			return traps
		}
	}
	return []Finding{{Message: "decode pod: " + oneLine(err)}}
}

// strictFinding turns one of sigs.k8s.io/json's strict errors (an unknown
// or duplicate field) into a finding at the field's path.
func strictFinding(err error) Finding {
	var fe sigsjson.FieldError
	if !errors.As(err, &fe) {
		return Finding{Message: oneLine(err)}
	}
	msg := "duplicate field: the kubelet silently keeps the last value"
	if strings.HasPrefix(fe.Error(), "unknown field") {
		msg = "unknown field: the kubelet silently drops it (a typo, or wrong indentation?)"
	}
	return Finding{Field: fe.FieldPath(), Message: msg}
}

// oneLine folds a multi-line library error onto one line, so that each
// finding stays one line of RejectedError.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
