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
}

// testResult is one test of a report: its name and, for a failure, why.
type testResult struct {
	Name, Reason string
	Took         time.Duration
}

// readJUnit reads ginkgo's JUnit report: the tests it ran,
// passed or failed; tests the filters left out are counted in neither.
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
				Skipped *struct{} `xml:"skipped"`
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
			if c.Skipped != nil || !strings.HasPrefix(c.Name, "[It] [sig-") {
				continue
			}
			r := testResult{Name: specName(c.Name), Took: time.Duration(c.Time * float64(time.Second))}
			switch {
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
}

func (s conformanceSummary) markdown() string {
	var b strings.Builder
	passed, failed := 0, 0
	for _, r := range s.Runs {
		passed += len(r.Passed)
		failed += len(r.Failed)
	}
	if s.Labels == "" || s.Labels == "Conformance" {
		fmt.Fprintf(&b, "# Conformance\n\n")
		fmt.Fprintf(&b, "Kubernetes' own conformance tests (every `[Conformance]` test of e2e.test v1.36.3, `[Serial]` included) on a kubeboot lab, as `make conformance` runs them.\n")
	} else {
		fmt.Fprintf(&b, "# Kubernetes' tests labelled %s\n\n", s.Labels)
		fmt.Fprintf(&b, "Every test of e2e.test v1.36.3 that the label filter `%s` selects, `[Serial]` included, on a kubeboot lab, as `make conformance-netpol` runs them.\n", s.Labels)
	}
	fmt.Fprintf(&b, "This file is written by that run (`test/e2e/conformance_test.go`); the JUnit reports are in `%s`.\n\n", s.Reports)
	fmt.Fprintf(&b, "**%d passed, %d failed** of %d run, on %s, in %s in all (the lab's bring-up and image imports included).\n\n",
		passed, failed, passed+failed, s.Started.UTC().Format("2006-01-02"), s.Took.Round(time.Second))
	if s.Focus != "" {
		fmt.Fprintf(&b, "Only the tests matching `%s` ran (`CONFORMANCE_FOCUS`).\n\n", s.Focus)
	}
	fmt.Fprintf(&b, "- Kubernetes v1.36.3 (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy), etcd v3.6.8, containerd v2.1.5, CoreDNS v1.14.2, all built from the Go module proxy (`make binaries`); e2e.test and ginkgo v1.36.3 likewise (`test/tools/build-e2e-test.sh`).\n")
	fmt.Fprintf(&b, "- The lab: three machines (systemd as PID 1, containerd and the kubelet as its services, kube-proxy in nftables mode): cp1 (`kubeboot init`), w1 (`kubeboot join`), w2 (`kubeadm join`). ginkgo runs from the host in cp1's network namespace.\n")
	fmt.Fprintf(&b, "- The tests' images are built here, laid out as registry.k8s.io's (see `conformanceImages` and test/tools/build.sh): no registry is reachable.\n\n")
	fmt.Fprintf(&b, "| run | passed | failed | took |\n|---|---|---|---|\n")
	for _, r := range s.Runs {
		fmt.Fprintf(&b, "| %s | %d | %d | %s |\n", r.Name, len(r.Passed), len(r.Failed), r.Took.Round(time.Second))
	}
	fmt.Fprintf(&b, "\n## Not run\n\nThese pull an image from a registry by design, and none is reachable here:\n\n")
	for _, name := range s.Skipped {
		fmt.Fprintf(&b, "- %s\n", name)
	}
	fmt.Fprintf(&b, "\n## Failed\n\n")
	if failed == 0 {
		fmt.Fprintf(&b, "None.\n")
	}
	for _, r := range s.Runs {
		for _, f := range r.Failed {
			fmt.Fprintf(&b, "- %s (%s run): %s\n", f.Name, r.Name, firstLine(f.Reason))
		}
	}
	return b.String()
}
