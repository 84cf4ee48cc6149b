package templates

import (
	"bytes"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
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
	// encoding/json writes map keys sorted, and JSONToYAML keeps that order.
	if data, err = json.Marshal(obj); err != nil {
		return nil, fmt.Errorf("marshal pod %q: %w", pod.Name, err)
	}
	out, err := yaml.JSONToYAML(data)
	if err != nil {
		return nil, fmt.Errorf("marshal pod %q: %w", pod.Name, err)
	}
	return out, nil
}
