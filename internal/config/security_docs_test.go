package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestSecurityDocsNameEverySwitch keeps docs/security.md in step with the
// security section: every field must be named there with its full path.
func TestSecurityDocsNameEverySwitch(t *testing.T) {
	docs, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range fieldPaths(reflect.TypeFor[Security](), "security.") {
		if !strings.Contains(string(docs), "`"+path) {
			t.Errorf("docs/security.md does not name %s", path)
		}
	}
}
