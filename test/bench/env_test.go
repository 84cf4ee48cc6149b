package main

import (
	"testing"
	"time"
)

// TestProcessStart: the machine's process-start floor is measured, not
// left at zero, and is a plausible time for /bin/true.
func TestProcessStart(t *testing.T) {
	d := processStart()
	if d <= 0 || d > time.Second {
		t.Fatalf("processStart() = %v, want a positive time under a second", d)
	}
}
