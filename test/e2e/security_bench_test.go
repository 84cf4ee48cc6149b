//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
)

// How kube-bench is made to see one lab as if it were a kubeadm node.
//
// kube-bench finds components with ps (`ps -C <binary>` and
// `ps -ef | grep <binary>`) and reads flags from their command lines; on
// this machine other labs run too, and their processes would answer. Some
// checks also read fixed paths (/etc/kubernetes/admin.conf,
// /etc/kubernetes/pki/), which no config.yaml override can move. So
// kube-bench runs in a private mount namespace where
//   - /etc/kubernetes is the lab's directory, which has kubeadm's layout
//     (manifests/, pki/, admin.conf, ...), so every default path is right;
//   - ps is a wrapper that shows only processes of this lab, recognised by
//     their command lines naming the lab's directory.
// Nothing of the benchmark is changed, and nothing outside the namespace
// sees the mounts.

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

// secPsWrapper passes ps's arguments to the real ps and keeps the lines
// of this lab's processes: those that show the lab's directory, and those
// that start with the pid of such a process (`ps -o pid=`).
const secPsWrapper = `#!/bin/sh
"%[1]s" "$@" | while IFS= read -r line; do
	case $line in
	*"%[2]s"*) printf '%%s\n' "$line"; continue ;;
	esac
	pid=$(printf '%%s' "$line" | tr -d ' ')
	case $pid in
	'' | *[!0-9]*) continue ;;
	esac
	if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "%[2]s"; then
		printf '%%s\n' "$line"
	fi
done
`

// secBenchScript sets up the namespace's mounts and runs kube-bench.
const secBenchScript = `set -e
cp /usr/bin/ps "$SEC_BENCH/real-ps"
mount --bind "$SEC_LAB_DIR" /etc/kubernetes
mount --bind "$SEC_BENCH/ps" /usr/bin/ps
exec "$SEC_KUBE_BENCH" run --config-dir "$SEC_CFG" --benchmark cis-1.11 --targets master,etcd,controlplane --json
`

// secRunKubeBench runs kube-bench against the lab and returns its checks
// by target (master, etcd, controlplane).
func secRunKubeBench(t *testing.T, l *secLab) map[string][]secBenchCheck {
	t.Helper()
	bench, err := os.MkdirTemp("", "kb-secbench-")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(bench) }()
	// The bind mount needs its mount point; a fresh machine may lack it.
	if _, err := os.Stat("/etc/kubernetes"); os.IsNotExist(err) {
		if err := os.Mkdir("/etc/kubernetes", 0o700); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = os.Remove("/etc/kubernetes") }()
	}
	labDir := l.dir + "/"
	wrapper := fmt.Sprintf(secPsWrapper, filepath.Join(bench, "real-ps"), labDir)
	if err := os.WriteFile(filepath.Join(bench, "ps"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", secBenchScript)
	cmd.Env = append(os.Environ(),
		"SEC_BENCH="+bench, "SEC_LAB_DIR="+l.dir,
		"SEC_KUBE_BENCH="+filepath.Join(l.binDir, "kube-bench"), "SEC_CFG="+filepath.Join(l.binDir, "kube-bench-cfg"))
	// Go makes the new namespace's mounts private before the script runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kube-bench: %v\n%s", err, stderr.String())
	}
	var out secBenchOutput
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("kube-bench output: %v\n%s", err, stdout.String())
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
func secKubeBench(t *testing.T, l *secLab) {
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
