package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReplaceTargets: a target's row is replaced in place, the other rows
// and the rest of the report left as they are; a report without the row
// is refused and left unchanged.
func TestReplaceTargets(t *testing.T) {
	path := filepath.Join(t.TempDir(), "benchmarks.md")
	doc := "# B\n\n## Targets\n\n| target | limit | measured | |\n|---|---|---|---|\n" +
		"| full render | ≤ 0.10× | 0.04× | met |\n" +
		"| control-plane bring-up | ≤ 0.50× | -34.08× (5.84 s vs -171 ms) | met |\n\n## Whole commands\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := replaceTargets(path, []target{{"control-plane bring-up", "≤ 0.50×", "0.84× (5.84 s vs 6.99 s)", false}}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(doc, "| -34.08× (5.84 s vs -171 ms) | met |", "| 0.84× (5.84 s vs 6.99 s) | **missed** |", 1)
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if err := replaceTargets(path, []target{{"worker join", "≤ 0.50×", "1.09×", false}}); err == nil || !strings.Contains(err.Error(), `"worker join"`) {
		t.Errorf("a report without the row: %v", err)
	}
	if again, _ := os.ReadFile(path); string(again) != want {
		t.Error("a refused replacement changed the report")
	}
}
