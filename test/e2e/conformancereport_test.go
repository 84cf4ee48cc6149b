//go:build e2e && conformance

package e2e

import (
	"encoding/xml"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"
)

// conformanceRun is what one ginkgo run's JUnit report says of the
// conformance tests it ran.
type conformanceRun struct {
	Name           string
	Took           time.Duration
	Passed, Failed []testResult
	// SkippedRunning are the tests the filters selected that skipped
	// themselves while running (e2e's skipper: a node count, a provider),
	// each with its reason: not passed, and no test of this lab may.
	SkippedRunning []testResult
}

// testResult is one test of a report: its name and, for a failure, why.
type testResult struct {
	Name, Reason string
	Took         time.Duration
}

// readJUnit reads ginkgo's JUnit report: the tests it ran, passed,
// failed or skipped while running; tests the filters left out (ginkgo's
// bare "skipped") are counted in none.
func readJUnit(path string) (conformanceRun, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return conformanceRun{}, err
	}
	var report struct {
		Suites []struct {
			Cases []struct {
				Name    string  `xml:"name,attr"`
				Status  string  `xml:"status,attr"`
				Time    float64 `xml:"time,attr"`
				Failure *struct {
					Message string `xml:"message,attr"`
					Text    string `xml:",chardata"`
				} `xml:"failure"`
				Error *struct {
					Message string `xml:"message,attr"`
				} `xml:"error"`
				Skipped *struct {
					Message string `xml:"message,attr"`
				} `xml:"skipped"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(data, &report); err != nil {
		return conformanceRun{}, fmt.Errorf("%s: %w", path, err)
	}
	var run conformanceRun
	for _, suite := range report.Suites {
		for _, c := range suite.Cases {
			// ginkgo's own nodes ([SynchronizedBeforeSuite], ...) name no
			// SIG; every test does.
			if c.Skipped != nil && c.Skipped.Message == filteredOut || !strings.HasPrefix(c.Name, "[It] [sig-") {
				continue
			}
			r := testResult{Name: specName(c.Name), Took: time.Duration(c.Time * float64(time.Second))}
			switch {
			case c.Skipped != nil:
				r.Reason = strings.TrimPrefix(c.Skipped.Message, filteredOut+" - ")
				run.SkippedRunning = append(run.SkippedRunning, r)
			case c.Failure != nil:
				r.Reason = c.Failure.Message
				run.Failed = append(run.Failed, r)
			case c.Error != nil:
				r.Reason = c.Error.Message
				run.Failed = append(run.Failed, r)
			default:
				run.Passed = append(run.Passed, r)
			}
		}
	}
	return run, nil
}

// filteredOut is the skipped message of ginkgo's report for a test the
// filters left out; a test that skipped itself adds " - <reason>".
const filteredOut = "skipped"

// labelsSuffix is the " [label, ...]" ginkgo's report adds to a name.
var labelsSuffix = regexp.MustCompile(` \[[^\[\]]*\]$`)

// specName is a test's name without the "[It] " and the labels ginkgo's
// report adds: "[sig-network] DNS should ... [Conformance]".
func specName(name string) string {
	return labelsSuffix.ReplaceAllString(strings.TrimSpace(strings.TrimPrefix(name, "[It]")), "")
}

// conformanceSummary is docs/conformance.md: the versions, the lab, each
// run's counts and duration, and every test that did not pass, with why.
type conformanceSummary struct {
	Runs    []conformanceRun
	Skipped []string
	Started time.Time
	Took    time.Duration
	Focus   string
	// Labels is the label filter of the tests run: Conformance, or
	// another set (make conformance-netpol).
	Labels string
	// Reports is the directory of the JUnit reports, as the repository's
	// root names it.
	Reports string
	// Target is the make target that runs them: conformance,
	// conformance-netpol or conformance-dualstack.
	Target string
	// DualStack says the lab's nodes, pods and Services had both IP
	// families.
	DualStack bool
}

func (s conformanceSummary) markdown() string {
	var b strings.Builder
	passed, failed, skipped := 0, 0, 0
	for _, r := range s.Runs {
		passed += len(r.Passed)
		failed += len(r.Failed)
		skipped += len(r.SkippedRunning)
	}
	if s.Labels == "" || s.Labels == "Conformance" {
		fmt.Fprintf(&b, "# Conformance\n\n")
		fmt.Fprintf(&b, "Kubernetes' own conformance tests (every `[Conformance]` test of e2e.test v1.36.3, `[Serial]` included) on a kubeboot lab, as `make conformance` runs them.\n")
	} else {
		fmt.Fprintf(&b, "# Kubernetes' tests labelled %s\n\n", s.Labels)
		fmt.Fprintf(&b, "Every test of e2e.test v1.36.3 that the label filter `%s` selects, `[Serial]` included, on a kubeboot lab, as `make %s` runs them.\n", s.Labels, s.Target)
	}
	fmt.Fprintf(&b, "This file is written by that run (`test/e2e/conformance_test.go`); the JUnit reports are in `%s`.\n\n", s.Reports)
	fmt.Fprintf(&b, "**%d passed, %d failed, %d skipped while running** of %d run, on %s, in %s in all (the lab's bring-up and image imports included).\n\n",
		passed, failed, skipped, passed+failed+skipped, s.Started.UTC().Format("2006-01-02"), s.Took.Round(time.Second))
	if s.Focus != "" {
		fmt.Fprintf(&b, "Only the tests matching `%s` ran (`CONFORMANCE_FOCUS`).\n\n", s.Focus)
	}
	fmt.Fprintf(&b, "- Kubernetes v1.36.3 (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy), etcd v3.6.8, containerd v2.1.5, CoreDNS v1.14.2, all built from the Go module proxy (`make binaries`); e2e.test and ginkgo v1.36.3 likewise (`test/tools/build-e2e-test.sh`).\n")
	fmt.Fprintf(&b, "- The lab: three machines (systemd as PID 1, containerd and the kubelet as its services, kube-proxy in nftables mode): cp1 (`kubeboot init`), w1 (`kubeboot join`), w2 (`kubeadm join`). ginkgo runs from the host in cp1's network namespace.\n")
	if s.DualStack {
		fmt.Fprintf(&b, "- The lab is dual-stack (as examples/dualstack.yaml): every node has an IPv4 and an IPv6 address (10.89.241.0/24 and fd89:0:0:241::/64), pods get one of each (10.245.0.0/16, fd10:245::/56), and Services may have both (10.96.0.0/12, fd10:96::/112).\n")
	}
	fmt.Fprintf(&b, "- The tests' images are built here, laid out as registry.k8s.io's (see `conformanceImages` and test/tools/build.sh): no registry is reachable.\n\n")
	fmt.Fprintf(&b, "| run | passed | failed | skipped while running | took |\n|---|---|---|---|---|\n")
	for _, r := range s.Runs {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %s |\n", r.Name, len(r.Passed), len(r.Failed), len(r.SkippedRunning), r.Took.Round(time.Second))
	}
	fmt.Fprintf(&b, "\n## Not run\n\nThese pull an image from a registry by design, and none is reachable here:\n\n")
	for _, name := range s.Skipped {
		fmt.Fprintf(&b, "- %s\n", name)
	}
	for _, section := range []struct {
		title string
		count int
		tests func(conformanceRun) []testResult
	}{
		{"Failed", failed, func(r conformanceRun) []testResult { return r.Failed }},
		{"Skipped while running", skipped, func(r conformanceRun) []testResult { return r.SkippedRunning }},
	} {
		fmt.Fprintf(&b, "\n## %s\n\n", section.title)
		if section.count == 0 {
			fmt.Fprintf(&b, "None.\n")
		}
		for _, r := range s.Runs {
			for _, f := range section.tests(r) {
				fmt.Fprintf(&b, "- %s (%s run): %s\n", f.Name, r.Name, firstLine(f.Reason))
			}
		}
	}
	return b.String()
}
