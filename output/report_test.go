package output

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestStagef: a stage is an info event of the current phase whose JSON
// names the stage, for programs that time a bring-up.
func TestStagef(t *testing.T) {
	var out bytes.Buffer
	r := NewReporter(&out, true)
	r.SetPhase("lab")
	r.Stagef("kubelet-started", "kubelet started (log: %s)", "k.log")
	var e map[string]any
	if err := json.Unmarshal(out.Bytes(), &e); err != nil {
		t.Fatalf("%s: %v", out.String(), err)
	}
	if e["stage"] != "kubelet-started" || e["phase"] != "lab" || e["level"] != LevelInfo || e["msg"] != "kubelet started (log: k.log)" || e["time"] == nil {
		t.Errorf("event %v", e)
	}
	out.Reset()
	NewReporter(&out, false).Stagef("x", "plain")
	if out.String() != "plain\n" {
		t.Errorf("for people: %q, want the message alone", out.String())
	}
}
