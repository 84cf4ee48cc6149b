package templates

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// viaJSONToYAML is what Marshal wrote before it encoded its map straight:
// the map's JSON, parsed as YAML and written again by sigs.k8s.io/yaml.
func viaJSONToYAML(t testing.TB, pod *corev1.Pod) []byte {
	t.Helper()
	data, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	decoder := json.NewDecoder(bytes.NewReader(data))
	decoder.UseNumber()
	if err := decoder.Decode(&obj); err != nil {
		t.Fatal(err)
	}
	if metadata, ok := obj["metadata"].(map[string]any); ok && metadata["creationTimestamp"] == nil {
		delete(metadata, "creationTimestamp")
	}
	if status, ok := obj["status"].(map[string]any); ok && len(status) == 0 {
		delete(obj, "status")
	}
	if data, err = json.Marshal(obj); err != nil {
		t.Fatal(err)
	}
	out, err := yaml.JSONToYAML(data)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// marshalPods are every static pod of the golden files, and a pod whose
// strings look like other YAML types and whose numbers reach int64's and
// int32's ends.
func marshalPods(t testing.TB) []*corev1.Pod {
	t.Helper()
	paths, err := filepath.Glob("testdata/*/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pods []*corev1.Pod
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var pod corev1.Pod
		if yaml.Unmarshal(data, &pod) != nil || pod.Kind != "Pod" {
			continue
		}
		pods = append(pods, &pod)
	}
	if len(pods) < 20 {
		t.Fatalf("only %d pods among the golden files", len(pods))
	}
	odd := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "odd", Annotations: map[string]string{
			"bool": "true", "int": "1", "float": "1e3", "hex": "0x10", "null": "~", "empty": "", "colon": "a: b", "multi": "a\nb", "date": "2001-12-14",
		}},
		Spec: corev1.PodSpec{
			ActiveDeadlineSeconds:         ptr.To(int64(math.MaxInt64)),
			TerminationGracePeriodSeconds: ptr.To(int64(math.MinInt64)),
			Priority:                      ptr.To(int32(math.MinInt32)),
			Containers: []corev1.Container{{Name: "c", Command: []string{"yes", "no", "-1", "0.5", ""},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}},
		},
	}
	return append(pods, odd)
}

// TestMarshalAsJSONToYAML: Marshal writes, byte for byte, what
// sigs.k8s.io/yaml's JSONToYAML of the pod's JSON wrote, for every
// golden static pod and for one of odd strings and extreme numbers.
func TestMarshalAsJSONToYAML(t *testing.T) {
	for _, pod := range marshalPods(t) {
		got, err := Marshal(pod)
		if err != nil {
			t.Fatal(err)
		}
		if want := viaJSONToYAML(t, pod); !bytes.Equal(got, want) {
			t.Errorf("pod %s:\n%s\nwant:\n%s", pod.Name, got, want)
		}
	}
}

// BenchmarkMarshal is Marshal of every golden static pod, beside the
// JSONToYAML path it replaced.
func BenchmarkMarshal(b *testing.B) {
	pods := marshalPods(b)
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			for _, pod := range pods {
				if _, err := Marshal(pod); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("via-JSONToYAML", func(b *testing.B) {
		for b.Loop() {
			for _, pod := range pods {
				viaJSONToYAML(b, pod)
			}
		}
	})
}
