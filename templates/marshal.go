package templates

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	yamlv2 "go.yaml.in/yaml/v2"
	corev1 "k8s.io/api/core/v1"
)

// Marshal returns pod as YAML. The output depends only on pod: keys are
// sorted, lists keep their order, and the empty creationTimestamp and status
// that every typed Pod carries are left out.
func Marshal(pod *corev1.Pod) ([]byte, error) {
	data, err := json.Marshal(pod)
	if err != nil {
		return nil, fmt.Errorf("marshal pod %q: %w", pod.Name, err)
	}
	// A generic map lets us drop fields that omitempty cannot; UseNumber
	// keeps numbers exactly as they were.
	var obj map[string]any
	decoder := json.NewDecoder(bytes.NewReader(data))
	decoder.UseNumber()
	if err := decoder.Decode(&obj); err != nil {
		return nil, fmt.Errorf("marshal pod %q: %w", pod.Name, err)
	}
	if metadata, ok := obj["metadata"].(map[string]any); ok && metadata["creationTimestamp"] == nil {
		delete(metadata, "creationTimestamp")
	}
	if status, ok := obj["status"].(map[string]any); ok && len(status) == 0 {
		delete(obj, "status")
	}
	// The YAML encoder sorts map keys. Encoding the map straight, its
	// numbers typed as a YAML parser would read them, writes what
	// sigs.k8s.io/yaml's JSONToYAML of its JSON would, without parsing
	// that JSON as YAML again, which took most of a converged init's
	// rendering (BenchmarkMarshal).
	out, err := yamlv2.Marshal(yamlNumbers(obj))
	if err != nil {
		return nil, fmt.Errorf("marshal pod %q: %w", pod.Name, err)
	}
	return out, nil
}

// yamlNumbers replaces, in a value decoded with UseNumber, each
// json.Number by the int or float64 a YAML parser reads it as.
func yamlNumbers(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = yamlNumbers(e)
		}
	case []any:
		for i, e := range v {
			v[i] = yamlNumbers(e)
		}
	case json.Number:
		if i, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return int(i)
		}
		if f, err := strconv.ParseFloat(string(v), 64); err == nil {
			return f
		}
		return string(v)
	}
	return v
}
