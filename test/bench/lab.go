package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/config"
)

// The lab template and what each round replaces in it, as the end-to-end
// tests do: every path, and the address.
const (
	labTemplate     = "examples/lab.yaml"
	templateDir     = "/tmp/kubeboot-lab"
	templateAddress = "127.0.0.1"
	labNodeName     = "bench"
)

// labRound is one round: `kubeboot lab up`, then the same manifests started
// directly as processes.
type labRound struct {
	// up is `kubeboot lab up` from start to exit: CRI runtime, PKI,
	// kubelet start, init, bootstrap-admin.
	up time.Duration
	// initToHealthy is from the start of init, right after the kubelet
	// started, to the event that saw the last component healthy.
	initToHealthy time.Duration
	// phases is kubeboot's own work inside that: from the start of init to
	// the wait phase's first event (preflight to write-manifests).
	phases time.Duration
	// direct is from starting the four processes directly to the moment
	// `kubeboot init phase wait` saw the last one healthy.
	direct time.Duration
}

// overhead is what the lab adds to the components' own start-up: kubeboot's
// phases plus the kubelet and CRI runtime starting the static pods.
func (r labRound) overhead() time.Duration { return r.initToHealthy - r.direct }

// measureLab runs the lab rounds, each on its own fresh directories.
func measureLab(ctx context.Context, o options, work string) ([]labRound, error) {
	tmpl, err := os.ReadFile(labTemplate)
	if err != nil {
		return nil, err
	}
	var rounds []labRound
	for i := range o.labRuns {
		logf("lab: round %d/%d on %s", i+1, o.labRuns, o.address)
		r, err := runLabRound(ctx, o, tmpl, filepath.Join(work, fmt.Sprintf("l%d", i)), filepath.Join(work, fmt.Sprintf("d%d", i)))
		if err != nil {
			return nil, fmt.Errorf("lab round %d: %w", i+1, err)
		}
		rounds = append(rounds, r)
	}
	return rounds, nil
}

func runLabRound(ctx context.Context, o options, tmpl []byte, labDir, directDir string) (labRound, error) {
	var r labRound
	labConfig, err := writeLabConfig(tmpl, labDir, o.address)
	if err != nil {
		return r, err
	}
	start := time.Now()
	out, upErr := kubebootJSON(ctx, o, 5*time.Minute, "lab", "up", "--config", labConfig, "--bin-dir", o.binDir, "-o", "json")
	r.up = time.Since(start)
	// Always stop the lab, even when up failed or the bench is interrupted.
	_, downErr := kubebootJSON(context.WithoutCancel(ctx), o, 2*time.Minute, "lab", "down", "--config", labConfig, "--bin-dir", o.binDir)
	if upErr != nil || downErr != nil {
		keepLogs(o, labDir)
		return r, errors.Join(upErr, downErr, leftovers(labDir))
	}
	if err := leftovers(labDir); err != nil {
		return r, err
	}
	events, err := readEvents(out)
	if err != nil {
		return r, err
	}
	// init starts right after the kubelet does.
	initStart, ok := findEvent(events, func(e event) bool { return e.Phase == "lab" && strings.HasPrefix(e.Msg, "kubelet started") })
	if !ok {
		return r, fmt.Errorf("no kubelet-started event in the lab up output:\n%s", out)
	}
	waitStart, ok := findEvent(events, func(e event) bool { return e.Phase == "wait" })
	if !ok {
		return r, fmt.Errorf("no wait event in the lab up output:\n%s", out)
	}
	healthy, err := allHealthy(events)
	if err != nil {
		return r, err
	}
	r.initToHealthy, r.phases = healthy.Sub(initStart), waitStart.Sub(initStart)

	directConfig, err := writeLabConfig(tmpl, directDir, o.address)
	if err != nil {
		return r, err
	}
	if err := copyNode(labDir, directDir); err != nil {
		return r, err
	}
	r.direct, err = directStart(ctx, o, directConfig, directDir)
	if err == nil {
		err = leftovers(directDir)
	}
	if err != nil {
		return r, err
	}
	return r, errors.Join(os.RemoveAll(labDir), os.RemoveAll(directDir))
}

// writeLabConfig writes the lab template with every path under dir, on
// address, and returns the file's path (dir + ".yaml").
func writeLabConfig(tmpl []byte, dir, address string) (string, error) {
	text := strings.ReplaceAll(string(tmpl), templateDir, dir)
	text = strings.ReplaceAll(text, templateAddress, address)
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		return "", fmt.Errorf("parse %s: %w", labTemplate, err)
	}
	node, ok := cfg["node"].(map[string]any)
	if !ok {
		return "", fmt.Errorf("%s has no node section", labTemplate)
	}
	node["name"] = labNodeName
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return "", err
	}
	return dir + ".yaml", os.WriteFile(dir+".yaml", data, 0o600)
}

// labStopGrace is how long kubeboot has to stop after SIGTERM before it
// is killed.
const labStopGrace = time.Minute

// kubebootJSON runs kubeboot outside any network namespace (the lab needs
// its loopback address) and returns its stdout.
func kubebootJSON(ctx context.Context, o options, timeout time.Duration, args ...string) ([]byte, error) {
	return kubebootEnv(ctx, o, timeout, nil, args...)
}

// kubebootEnv is kubebootJSON with env added to this process's environment.
func kubebootEnv(ctx context.Context, o options, timeout time.Duration, env []string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, o.kubeboot, args...)
	// On a timeout or an interrupted bench, kubeboot gets SIGTERM, as from
	// a user, so that a lab stops its nodes' processes before it exits.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = labStopGrace
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("kubeboot %s: %w\n%s%s", strings.Join(args, " "), err, lastLines(string(out), 10), lastLines(stderr.String(), 20))
	}
	return out, nil
}

// keepLogs copies a failed lab's logs to the raw dir.
func keepLogs(o options, labDir string) {
	logs, _ := filepath.Glob(filepath.Join(labDir, "lab", "*.log"))
	for _, l := range logs {
		if data, err := os.ReadFile(l); err == nil {
			dst := filepath.Join(o.rawDir, "lab-failed-"+filepath.Base(l))
			_ = os.WriteFile(dst, data, 0o644)
			logf("kept %s", dst)
		}
	}
}

// leftovers fails if any process still names dir on its command line:
// every process of a round (runtime, kubelet, components) does, and all
// must be gone once the round stopped them. It kills those it finds, by
// pid; they are the bench's own.
func leftovers(dir string) error {
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		return err
	}
	var found []string
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(data, []byte(dir+"/")) {
			continue
		}
		pid := filepath.Base(filepath.Dir(p))
		found = append(found, pid+" "+strings.ReplaceAll(string(data), "\x00", " "))
		if n, err := strconv.Atoi(pid); err == nil {
			_ = syscall.Kill(n, syscall.SIGKILL)
		}
	}
	if len(found) > 0 {
		return fmt.Errorf("processes left running after the round (now killed):\n%s", strings.Join(found, "\n"))
	}
	return nil
}

// event is a JSON progress line of `kubeboot ... -o json`.
type event struct {
	Time  time.Time `json:"time"`
	Phase string    `json:"phase"`
	Msg   string    `json:"msg"`
	// Stage names a stage of a node's bring-up (lab up's events).
	Stage  string `json:"stage"`
	Health *struct {
		Component string `json:"component"`
		State     string `json:"state"`
	} `json:"health"`
}

func readEvents(out []byte) ([]event, error) {
	var events []event
	for line := range bytes.Lines(out) {
		var e event
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("decode event %q: %w", line, err)
		}
		events = append(events, e)
	}
	return events, nil
}

func findEvent(events []event, match func(event) bool) (time.Time, bool) {
	for _, e := range events {
		if match(e) {
			return e.Time, true
		}
	}
	return time.Time{}, false
}

// allHealthy returns the time of the event after which every control-plane
// component was healthy.
func allHealthy(events []event) (time.Time, error) {
	state := map[string]string{}
	for _, e := range events {
		if e.Health == nil {
			continue
		}
		state[e.Health.Component] = e.Health.State
		if !slices.ContainsFunc(config.ComponentNames, func(c string) bool { return state[c] != "healthy" }) {
			return e.Time, nil
		}
	}
	return time.Time{}, fmt.Errorf("not every component became healthy: %v", state)
}
