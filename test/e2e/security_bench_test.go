//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// kube-bench runs in the node's machine, where every process is the
// node's, as on any node. Some checks read fixed paths
// (/etc/kubernetes/admin.conf, /etc/kubernetes/pki/), which no config.yaml
// override can move, so it runs in a private mount namespace of the
// machine where /etc/kubernetes is the node's directory, which has
// kubeadm's layout (manifests/, pki/, admin.conf, ...). Nothing of the
// benchmark is changed.

// secBenchCheck is one check of kube-bench's JSON output.
type secBenchCheck struct {
	ID     string `json:"test_number"`
	Desc   string `json:"test_desc"`
	Status string `json:"status"`
	Scored bool   `json:"scored"`
	Actual string `json:"actual_value"`
	Reason string `json:"reason"`
}

type secBenchOutput struct {
	Controls []struct {
		Type   string `json:"node_type"`
		Groups []struct {
			Checks []secBenchCheck `json:"results"`
		} `json:"tests"`
	} `json:"Controls"`
}

// secBenchScript mounts the node's directory at /etc/kubernetes and runs
// kube-bench.
const secBenchScript = `set -e
mkdir -p /etc/kubernetes
mount --bind "$1" /etc/kubernetes
exec "$2/kube-bench" run --config-dir "$2/kube-bench-cfg" --benchmark cis-1.11 --targets master,etcd,controlplane --json
`

// secRunKubeBench runs kube-bench in the node's machine, from a copy in
// the node's root, and returns its checks by target (master, etcd,
// controlplane).
func secRunKubeBench(t *testing.T, l *node) map[string][]secBenchCheck {
	t.Helper()
	bench := filepath.Join(l.root, "bench")
	if err := os.Mkdir(bench, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-r", filepath.Join(binDir, "kube-bench"), filepath.Join(binDir, "kube-bench-cfg"), bench).CombinedOutput(); err != nil {
		t.Fatalf("copy kube-bench into the node's root: %v: %s", err, out)
	}
	r := l.run(t, "unshare", "--mount", "--propagation", "private", "sh", "-c", secBenchScript, "sh", l.dir, bench)
	if r.code != 0 {
		t.Fatalf("kube-bench exited %d:\n%s", r.code, r.stderr)
	}
	var out secBenchOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("kube-bench output: %v\n%s", err, r.stdout)
	}
	byTarget := map[string][]secBenchCheck{}
	for _, c := range out.Controls {
		for _, g := range c.Groups {
			byTarget[c.Type] = append(byTarget[c.Type], g.Checks...)
		}
	}
	return byTarget
}

// secKubeBench runs the CIS benchmark and holds kubeboot to it: no master
// check fails and at least 55 pass, every etcd check passes, and every
// remaining warning is explained in docs/security.md.
func secKubeBench(t *testing.T, l *node) {
	docs, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	results := secRunKubeBench(t, l)
	targets := []string{"master", "etcd", "controlplane"}
	for _, target := range targets {
		checks := results[target]
		counts := map[string]int{}
		var notPassed []string
		for _, c := range checks {
			counts[c.Status]++
			if c.Status != "PASS" {
				notPassed = append(notPassed, fmt.Sprintf("%s %s %s (%s)", c.Status, c.ID, c.Desc, strings.TrimSpace(c.Actual+" "+c.Reason)))
			}
			if c.Status == "WARN" && !secDocumentsCheck(docs, c.ID) {
				t.Errorf("%s: WARN %s is not explained in docs/security.md", target, c.ID)
			}
		}
		sort.Strings(notPassed)
		t.Logf("kube-bench cis-1.11 %s: PASS %d, FAIL %d, WARN %d, INFO %d (of %d)\n  %s",
			target, counts["PASS"], counts["FAIL"], counts["WARN"], counts["INFO"], len(checks), strings.Join(notPassed, "\n  "))
		if len(checks) == 0 {
			t.Errorf("%s: kube-bench ran no check", target)
		}
		switch target {
		case "master":
			if counts["FAIL"] != 0 || counts["PASS"] < 55 {
				t.Errorf("master: %d FAIL and %d PASS, want 0 FAIL and at least 55 PASS", counts["FAIL"], counts["PASS"])
			}
		case "etcd":
			if counts["PASS"] != len(checks) {
				t.Errorf("etcd: %d of %d checks pass, want all", counts["PASS"], len(checks))
			}
		}
	}
	if len(results) != len(targets) {
		keys := make([]string, 0, len(results))
		for k := range results {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		t.Errorf("kube-bench reported targets %v, want %v", keys, targets)
	}
}

// secDocumentsCheck reports whether the docs name a check ID in a table
// cell or a heading, like "| 1.2.1 |" or "1.2.1:".
func secDocumentsCheck(docs []byte, id string) bool {
	return regexp.MustCompile(`(^|[\s|(])` + regexp.QuoteMeta(id) + `($|[\s|,):])`).Match(docs)
}
