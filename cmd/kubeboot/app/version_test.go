package app

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestVersionSaysUntagged: a build from a tagged commit prints the tag; one
// from a tree without a tag, or one nobody stamped, says plainly that it is
// untagged and from which commit, in the text and in the JSON.
func TestVersionSaysUntagged(t *testing.T) {
	for _, tc := range []struct {
		stamped, revision string
		text              string
		tagged            bool
		commit            string
	}{
		{"v0.4.0", "", "kubeboot v0.4.0 (", true, ""},
		{"v0.4.0-3-g1a2b3c4-dirty", "", "kubeboot v0.4.0-3-g1a2b3c4-dirty (", true, ""},
		{"1a2b3c4", "", "kubeboot untagged build 1a2b3c4 (", false, "1a2b3c4"},
		{"1a2b3c4-dirty", "", "kubeboot untagged build 1a2b3c4-dirty (", false, "1a2b3c4"},
		{"", "1a2b3c4d5e6f", "kubeboot untagged build 1a2b3c4d5e6f (", false, "1a2b3c4d5e6f"},
		{"", "", "kubeboot untagged build (commit unknown) (", false, ""},
		{"dev", "", "kubeboot untagged build (commit unknown) (", false, ""},
	} {
		d := newDeps("")
		d.version.setVersion(tc.stamped, tc.revision)
		code, stdout, stderr := runCLIWith(t, d, "version")
		if code != 0 || !strings.HasPrefix(stdout, tc.text) || strings.Contains(stdout, "(devel)") {
			t.Errorf("%q: version: exit %d, %q %s", tc.stamped, code, stdout, stderr)
		}
		code, stdout, stderr = runCLIWith(t, d, "version", "-o", "json")
		var v versionInfo
		if code != 0 || json.Unmarshal([]byte(stdout), &v) != nil {
			t.Fatalf("%q: version -o json: exit %d, %q %s", tc.stamped, code, stdout, stderr)
		}
		if v.Tagged != tc.tagged || v.Commit != tc.commit || !strings.Contains(stdout, `"tagged":`) {
			t.Errorf("%q: version -o json: %s", tc.stamped, stdout)
		}
	}
}
