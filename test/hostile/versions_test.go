package hostile

import (
	"strings"
	"testing"
	"time"
)

// planAt is a row: upgrade plan VERSION on an initialised node, reading
// its admin.conf, whose API server does not answer: a VERSION kubeboot
// cannot render is refused with exit 2 before anything dials it.
func planAt(defect, version, message string) row {
	return row{
		defect: defect, name: "upgrade plan " + strings.TrimSpace(version) + " is refused at once",
		setup: func(e env) []string {
			e.initNode()
			c := e.config("c.yaml", "paths: {kubeconfigDir: "+e.node+"/etc/kubernetes}\n")
			return []string{"upgrade", "plan", version, "--config", c}
		},
		code: 2, message: `upgrade plan VERSION "` + version + `": ` + message, within: 2 * time.Second,
	}
}

// versionRows are the class 5, versions not parsed as the
// configuration parses them, and the version cases of class 6, user
// mistakes that exit 1 after a dial or are blamed on another field.
var versionRows = []row{
	planAt("5", "v1.36.3+evil", "want a release version like v1.36.3: MAJOR.MINOR.PATCH, without pre-release, build metadata or spaces"),
	planAt("5", "v1.36.3 ", "want a release version like v1.36.3"),
	planAt("6", "v1.37.0", "unsupported: kubeboot supports v1.34 to v1.36"),
	{
		defect: "6", name: "a bad kubernetesVersion is blamed on kubernetesVersion alone",
		setup: func(e env) []string {
			return append([]string{"init", "--root", e.node, "--config", e.config("c.yaml", "kubernetesVersion: v1.36.3+evil\n")}, skip...)
		},
		code: 2, message: `line 3: kubernetesVersion: Invalid value: "v1.36.3+evil": want a release version like v1.36.3`,
		check: func(e env, res result) {
			if strings.Contains(res.stderr, "addons.") {
				e.t.Errorf("blames a field the file does not set: %s", res.stderr)
			}
		},
	},
	{
		defect: "6", name: "a duration past its range names its field",
		setup: func(e env) []string {
			return append([]string{"init", "--root", e.node, "--config", e.config("c.yaml", "timeouts: {controlPlane: 9999999999h}\n")}, skip...)
		},
		code: 2, message: `line 3: timeouts.controlPlane: time: invalid duration "9999999999h": want a duration like 90s, 4m or 24h, of at most 2562047h`,
	},
}

func TestHostileVersions(t *testing.T) { runRows(t, versionRows) }
