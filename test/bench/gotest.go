package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// microPackages hold the micro-benchmarks: PKI per algorithm, rendering per
// component, validating a manifest and a configuration, init's writing
// phases and files.AtomicWriter on an unchanged node, applying the addons.
// health's BenchmarkWaitDetection runs on its own, with a fixed count.
var microPackages = []string{"./pki", "./templates", "./internal/staticpod", "./internal/config", "./phases"}

// benchLine is one result line of `go test -bench`.
type benchLine struct {
	// name is the benchmark's name without the -GOMAXPROCS suffix.
	name string
	// units lists the line's units in order; values maps each to its value.
	units  []string
	values map[string]float64
}

// microResults is the raw output, for benchstat, and its parsed lines.
type microResults struct {
	raw   string
	lines []benchLine
}

func microBenchmarks(ctx context.Context, o options) (microResults, error) {
	logf("micro-benchmarks: go test -bench . -count %d %s", o.microCount, strings.Join(microPackages, " "))
	args := append([]string{"test", "-run", "^$", "-bench", ".", "-benchmem", "-count", strconv.Itoa(o.microCount)}, microPackages...)
	raw, err := goTest(ctx, o, "micro.txt", args...)
	return microResults{raw: raw, lines: parseBench(raw)}, err
}

// waitResults are BenchmarkWaitDetection's percentiles, one per -count run.
type waitResults struct {
	raw           string
	p50, p95, max []float64
}

func waitDetection(ctx context.Context, o options) (waitResults, error) {
	logf("wait detection: go test ./internal/health -bench WaitDetection -benchtime 20x -count %d", o.waitCount)
	raw, err := goTest(ctx, o, "wait.txt", "test", "./internal/health", "-run", "^$", "-bench", "WaitDetection", "-benchtime", "20x", "-count", strconv.Itoa(o.waitCount))
	res := waitResults{raw: raw}
	if err != nil {
		return res, err
	}
	for _, l := range parseBench(raw) {
		res.p50 = append(res.p50, l.values["p50-ms"])
		res.p95 = append(res.p95, l.values["p95-ms"])
		res.max = append(res.max, l.values["max-ms"])
	}
	if len(res.p50) == 0 {
		return res, fmt.Errorf("no BenchmarkWaitDetection result in:\n%s", raw)
	}
	return res, nil
}

// goTest runs the go command and keeps its output in the raw dir as well,
// so two runs can be compared with benchstat.
func goTest(ctx context.Context, o options, rawName string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, o.goBin, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", o.goBin, strings.Join(args, " "), err, out)
	}
	return string(out), os.WriteFile(filepath.Join(o.rawDir, rawName), out, 0o644)
}

// parseBench reads the result lines of `go test -bench` output:
// "BenchmarkName-2   <N>   <value> <unit>   <value> <unit> ...".
func parseBench(out string) []benchLine {
	var lines []benchLine
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		l := benchLine{name: name, values: map[string]float64{}}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			l.units = append(l.units, f[i+1])
			l.values[f[i+1]] = v
		}
		lines = append(lines, l)
	}
	return lines
}
