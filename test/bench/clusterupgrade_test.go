package main

import (
	"strings"
	"testing"
)

// TestClusterUpgradeSection: the table gives each sequence's min, median
// and max, its median's ratio to kubeadm's and the Service's longest gap.
func TestClusterUpgradeSection(t *testing.T) {
	r := &clusterUpgradeResults{rounds: 3,
		took: map[string][]float64{"kubeboot": {170, 150, 160}, "kubeadm": {300, 320, 310}},
		gap:  map[string][]float64{"kubeboot": {0, 0.3, 0}, "kubeadm": {0, 0, 1.5}}}
	var b strings.Builder
	r.markdown(&b)
	for _, want := range []string{
		clusterUpgradeHeading + "\n\n",
		"| kubeboot | " + fmtSeconds(150) + " / " + fmtSeconds(160) + " / " + fmtSeconds(170) + " | 0.52× | " + fmtSeconds(0.3) + " |",
		"| kubeadm | " + fmtSeconds(300) + " / " + fmtSeconds(310) + " / " + fmtSeconds(320) + " | 1.00× | " + fmtSeconds(1.5) + " |",
		"3 round(s)",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the section lacks %q:\n%s", want, b.String())
		}
	}
}
