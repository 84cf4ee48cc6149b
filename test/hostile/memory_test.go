package hostile

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/inputfile"
)

// peakMemory is the most memory (resident set) one run may take on any
// input under the size limits: kubeboot refuses what would take more.
const peakMemory = 256 << 20

// TestMemory runs the inputs of class 4 of issue 27: the worst files under
// the size limits, for a configuration and for `kubeboot validate`.
func TestMemory(t *testing.T) { runRows(t, memoryRows) }

// measured runs kubeboot like run, and fails the row if its peak resident
// memory passes peakMemory.
func measured(e env, args []string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd, stdout, stderr := command(ctx, e.dir, args...)
	start := time.Now()
	err := cmd.Run()
	res := finish(e.t, cmd, err, stdout, stderr, time.Since(start))
	// Maxrss is in KiB on Linux.
	peak := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10
	e.t.Logf("kubeboot %s: exit %d, peak memory %d MiB, %s", args[0], res.code, peak>>20, res.took.Round(time.Millisecond))
	if peak > peakMemory {
		e.t.Errorf("peak memory %d MiB, want at most %d MiB", peak>>20, peakMemory>>20)
	}
	return res
}

// filled repeats item after head as many times as fits in limit bytes
// with tail.
func filled(head, item, tail string, limit int) string {
	return head + strings.Repeat(item, (limit-len(head)-len(tail))/len(item)) + tail
}

// laughs is a billion laughs: ten levels of ten aliases of the level
// below, 10^10 nodes once expanded.
func laughs(indent string) string {
	text := indent + "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
	for i := 1; i < 10; i++ {
		alias := "*a" + string(rune('0'+i-1))
		text += indent + "a" + string(rune('0'+i)) + ": &a" + string(rune('0'+i)) + " [" + strings.TrimSuffix(strings.Repeat(alias+", ", 10), ", ") + "]\n"
	}
	return text
}

// configRow checks `kubeboot config validate` on a ClusterConfiguration
// made of the fields that fields returns (generated only when the row runs).
func configRow(name string, fields func() string, code int, message string) row {
	return row{
		defect: "27.4", name: "config: " + name,
		setup: func(e env) []string {
			return []string{"config", "validate", e.config("c.yaml", fields())}
		},
		run:  measured,
		code: code, message: message, within: 20 * time.Second,
	}
}

// manifestRow checks `kubeboot validate` on the manifest that text
// returns, alone and in a manifest directory: it is rejected (exit 3), and
// its report (on stdout) holds finding.
func manifestRow(name string, text func() string, finding string) []row {
	const code = 3
	file := func(e env) []string {
		writeFile(e.t, e.path("m/pod.yaml"), text(), 0o600)
		return []string{"validate", e.path("m/pod.yaml")}
	}
	dir := func(e env) []string {
		writeFile(e.t, e.path("m/pod.yaml"), text(), 0o600)
		return []string{"validate", e.path("m")}
	}
	check := func(e env, res result) {
		if !strings.Contains(res.stdout, finding) {
			e.t.Errorf("stdout:\n%.2000s\nwant %q", res.stdout, finding)
		}
	}
	return []row{
		{defect: "27.4", name: "validate FILE: " + name, setup: file, run: measured, code: code, check: check, within: 20 * time.Second},
		{defect: "27.4", name: "validate DIR: " + name, setup: dir, run: measured, code: code, check: check, within: 20 * time.Second},
	}
}

// refusedConfig is the message of a configuration over the node limit.
const refusedConfig = "too many YAML nodes: more than 50000 values"

// refusedManifest is the finding of a manifest over the node limit.
const refusedManifest = "not decoded: more than 100000 values"

// extraConfig starts a list of kubelet.extraConfig, which takes any YAML.
const extraConfig = "kubelet:\n  extraConfig:\n    x: "

// pod is a manifest's head, before the fields under test.
const pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: kube-system\n"

// container is a pod's one container, whose args come next.
const container = "spec:\n  containers:\n  - name: c\n    image: registry.k8s.io/pause:3.10\n    args:"

var memoryRows = concat(
	[]row{
		configRow("two million one-byte list items", func() string {
			return filled(extraConfig+"[", "1,", "1]\n", inputfile.ConfigLimit-100)
		}, 2, refusedConfig),
		configRow("a million block list items", func() string {
			return filled(extraConfig+"\n", "    - 1\n", "", inputfile.ConfigLimit-100)
		}, 2, refusedConfig),
		configRow("a flow map of 700,000 keys", func() string {
			return filled(extraConfig+"{", "a: 1, ", "}\n", inputfile.ConfigLimit-100)
		}, 2, refusedConfig),
		configRow("a million empty documents", func() string {
			return filled("", "---\n", "", inputfile.ConfigLimit-100)
		}, 2, refusedConfig),
		configRow("a billion laughs", func() string {
			return "kubelet:\n  extraConfig:\n" + laughs("    ")
		}, 2, refusedConfig),
		configRow("a 4 MiB string of words", func() string {
			return filled(extraConfig+`"`, "a ", "\"\n", inputfile.ConfigLimit-100)
		}, 2, refusedConfig),
		configRow("just under the node limit: 24,000 list items", func() string {
			return extraConfig + "[" + strings.Repeat("1,", 24_000) + "1]\n"
		}, 2, "kubelet.extraConfig.x"),
		configRow("just under the node limit: 24,000 duplicate null keys", func() string {
			return extraConfig + "{" + strings.Repeat("k,", 24_000) + "k}\n"
		}, 2, "duplicate key"),
		configRow("apiServer.certSANs of 24,000 names", func() string {
			return "apiServer:\n  certSANs: [" + strings.Repeat("a.example,", 24_000) + "a]\n"
		}, 0, ""),
		configRow("a 4 MiB string", func() string {
			return filled(extraConfig+`"`, "a", "\"\n", inputfile.ConfigLimit-100)
		}, 2, "kubelet.extraConfig.x"),
		configRow("nested 9,000 deep", func() string {
			return extraConfig + strings.Repeat("[", 9000) + strings.Repeat("]", 9000) + "\n"
		}, 2, "kubelet.extraConfig.x"),
		configRow("a hundred keys of 40 KB", func() string {
			return "kubelet:\n  extraConfig:\n" + strings.Repeat("    ? "+strings.Repeat("k", 40_000)+"\n    : 1\n", 100)
		}, 2, "kubelet.extraConfig.kkkk"),
	},
	manifestRow("five million one-byte args", func() string {
		return filled(pod+container+" [", "a,", "a]\n", inputfile.ManifestLimit)
	}, refusedManifest),
	manifestRow("a million block list args", func() string {
		return filled(pod+container+"\n", "    - a\n", "", inputfile.ManifestLimit)
	}, refusedManifest),
	manifestRow("five million JSON numbers", func() string {
		return filled(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"i","args":[`, "1,", "1]}]}}", inputfile.ManifestLimit)
	}, refusedManifest),
	manifestRow("two million empty documents", func() string {
		return filled(pod+container+" [a]\n", "---\n", "", inputfile.ManifestLimit)
	}, refusedManifest),
	manifestRow("a billion laughs", func() string {
		return pod + "  annotations:\n" + laughs("    ") + container + " [a]\n"
	}, refusedManifest),
	manifestRow("just under the node limit: 48,000 yes args", func() string {
		return pod + container + " [" + strings.Repeat("yes,", 48_000) + "yes]\n"
	}, "YAML 1.1 reads the bare yes"),
	manifestRow("just under the node limit: 48,000 duplicate labels", func() string {
		return pod + "  labels: {" + strings.Repeat("k,", 48_000) + "k}\n" + container + " [a]\n"
	}, "duplicate mapping key"),
	manifestRow("a 10 MiB annotation and 40,000 args", func() string {
		return pod + "  annotations:\n    a: \"" + strings.Repeat("a", inputfile.ManifestLimit-400_000) + "\"\n" + container + " [" + strings.Repeat("a,", 40_000) + "a]\n"
	}, "metadata.annotations: too long"),
	manifestRow("nested 9,000 deep", func() string {
		return pod + "  labels: " + strings.Repeat("[", 9000) + strings.Repeat("]", 9000) + "\n" + container + " [a]\n"
	}, "metadata.labels"),
)

// concat joins lists of rows.
func concat(lists ...[]row) []row {
	var all []row
	for _, l := range lists {
		all = append(all, l...)
	}
	return all
}

// inputRow checks one command on a flood of one-byte items that path holds,
// which the command reads as YAML: it must refuse it, within the memory
// bound, before any decoder runs.
func inputRow(name, path string, limit int, args func(e env) []string, code int, message string) row {
	return row{
		defect: "27.4", name: name,
		setup: func(e env) []string {
			writeFile(e.t, e.path(path), filled("x: [", "1,", "1]\n", limit-100), 0o600)
			return args(e)
		},
		run:  measured,
		code: code, message: message, within: 20 * time.Second,
	}
}

// inputRows are the other YAML files kubeboot reads from its user: a
// discovery file, a patch, an audit policy and a lab description.
var inputRows = []row{
	inputRow("join --discovery-file: two million one-byte items", "d.conf", inputfile.ConfigLimit, func(e env) []string {
		return []string{"join", "--discovery-file", e.path("d.conf")}
	}, 2, refusedConfig),
	inputRow("a patch of 500,000 one-byte items", "node/etc/p/kube-apiserver.yaml", inputfile.PatchLimit, func(e env) []string {
		return append([]string{"init", "--dry-run", "--root", e.node, "--config", e.config("c.yaml", "patchesDir: /etc/p\n")}, skip...)
	}, 1, "too many YAML nodes: more than 100000 values"),
	inputRow("an audit policy of two million one-byte items", "node/etc/audit.yaml", inputfile.ConfigLimit, func(e env) []string {
		return append([]string{"init", "--dry-run", "--root", e.node, "--config", e.config("c.yaml", "security: {audit: {policyFile: /etc/audit.yaml}}\n")}, skip...)
	}, 1, "check audit policy (security.audit.policyFile): read \"/etc/audit.yaml\": "+refusedConfig),
	inputRow("lab down --cluster: two million one-byte items", "lab.yaml", inputfile.ConfigLimit, func(e env) []string {
		return []string{"lab", "down", "--cluster", e.path("lab.yaml")}
	}, 2, refusedConfig),
}

// TestMemoryOfOtherInputs runs inputRows.
func TestMemoryOfOtherInputs(t *testing.T) { runRows(t, inputRows) }
