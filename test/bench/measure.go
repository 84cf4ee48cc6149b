package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// sample is one timed run of a job.
type sample struct {
	wall, cpu time.Duration
	// rss is the peak resident set size in bytes; for a job of several
	// commands, the largest.
	rss int64
}

// step is one command line of a job, or work in the bench's own process.
type step struct {
	argv []string
	// env is added to the bench's own environment.
	env []string
	// hostNet runs the command in the bench's network namespace rather
	// than a new, empty one: it talks to a server the bench started on a
	// loopback address.
	hostNet bool
	// call, if set instead of argv, is work timed inside the bench's own
	// process, which does nothing else meanwhile: wall and CPU time, no
	// peak RSS.
	call func() error
}

// job is a command, or a short sequence of commands, timed as one unit.
type job struct {
	// name labels the job in the report.
	name string
	// shown is the command line printed in the report, with placeholders
	// for the temporary directories.
	shown string
	// prepare runs untimed before each run, e.g. to empty an output dir.
	prepare func() error
	steps   []step
	// check, if set, receives the last step's stdout after each run.
	check   func(stdout []byte) error
	samples []sample
}

// group is jobs measured together, interleaved, and compared to ref.
type group struct {
	title string
	jobs  []*job
	// ref is the job the others' ratios are relative to; nil for none.
	ref *job
}

// measure runs warmup untimed rounds, then runs timed rounds of every job.
// Each round runs every job once, starting with a different job each round,
// so a slow spell of the machine is spread over all jobs, and the i-th
// samples of two jobs were taken seconds apart.
func measure(ctx context.Context, g *group, warmup, runs int, rssFile string) error {
	for round := range warmup + runs {
		timed := round >= warmup
		if timed {
			logf("%s: round %d/%d", g.title, round-warmup+1, runs)
		}
		for i := range g.jobs {
			j := g.jobs[(i+round)%len(g.jobs)]
			s, err := j.runOnce(ctx, rssFile)
			if err != nil {
				return fmt.Errorf("%s: %w", j.name, err)
			}
			if timed {
				j.samples = append(j.samples, s)
			}
		}
	}
	return nil
}

func (j *job) runOnce(ctx context.Context, rssFile string) (sample, error) {
	if j.prepare != nil {
		if err := j.prepare(); err != nil {
			return sample{}, err
		}
	}
	var total sample
	var stdout bytes.Buffer
	for i, st := range j.steps {
		var out io.Writer // nil: /dev/null
		if j.check != nil && i == len(j.steps)-1 {
			out = &stdout
		}
		s, err := st.run(ctx, out, rssFile)
		if err != nil {
			return sample{}, err
		}
		total.wall += s.wall
		total.cpu += s.cpu
		total.rss = max(total.rss, s.rss)
	}
	if j.check != nil {
		if err := j.check(stdout.Bytes()); err != nil {
			return sample{}, err
		}
	}
	return total, nil
}

// run times the step: its call, or its command under GNU time.
func (st step) run(ctx context.Context, stdout io.Writer, rssFile string) (sample, error) {
	if st.call != nil {
		return callTimed(st.call)
	}
	return execTimed(ctx, st, stdout, rssFile)
}

// callTimed runs f and returns its wall time and the CPU time this process
// spent meanwhile (getrusage of the whole process, so the garbage
// collector's work for f counts).
func callTimed(f func() error) (sample, error) {
	var before, after syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &before); err != nil {
		return sample{}, err
	}
	start := time.Now()
	err := f()
	wall := time.Since(start)
	if err != nil {
		return sample{}, err
	}
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &after); err != nil {
		return sample{}, err
	}
	cpu := func(r syscall.Rusage) time.Duration {
		return time.Duration(r.Utime.Nano() + r.Stime.Nano())
	}
	return sample{wall: wall, cpu: cpu(after) - cpu(before)}, nil
}

// gnuTime is GNU time (Debian package time). It runs each timed command to
// report its peak RSS ("Maximum resident set size" of -v, %M). The bench
// cannot take it from its own wait4: Go starts children with vfork, and
// Linux carries the high-water mark of the image a process leaves at exec
// into the new one, so ru_maxrss would never be below the bench's own RSS.
// GNU time forks the command from its own small image instead.
const gnuTime = "/usr/bin/time"

// ensureGNUTime installs GNU time where it is missing, as on a fresh machine.
func ensureGNUTime(ctx context.Context) error {
	if _, err := os.Stat(gnuTime); err == nil {
		return nil
	}
	logf("installing GNU time (Debian package time)")
	for _, args := range [][]string{{"update", "-qq"}, {"install", "-y", "-qq", "time"}} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("apt-get %s: %w", strings.Join(args, " "), err)
		}
	}
	return nil
}

// execTimed runs one command under GNU time, in a new, empty network
// namespace unless st.hostNet, and returns its wall time, CPU time and peak RSS. GNU time
// writes the RSS to rssFile. Wall and CPU time include GNU time's own fork
// and exec, under a millisecond, the same for every command.
func execTimed(ctx context.Context, st step, stdout io.Writer, rssFile string) (sample, error) {
	argv := append([]string{gnuTime, "--format=%M", "--output=" + rssFile, "--"}, st.argv...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), st.env...)
	cmd.Stdout = stdout
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if !st.hostNet {
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	}
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	if err != nil {
		return sample{}, fmt.Errorf("%s: %w\n%s", strings.Join(st.argv, " "), err, lastLines(stderr.String(), 20))
	}
	// GNU time's CPU time includes the command's, which it waited for.
	s := sample{wall: wall, cpu: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()}
	data, err := os.ReadFile(rssFile)
	if err != nil {
		return s, err
	}
	kb, err := strconv.ParseInt(strings.TrimSpace(lastLines(string(data), 1)), 10, 64)
	if err != nil {
		return s, fmt.Errorf("read the peak RSS GNU time wrote: %w", err)
	}
	s.rss = kb * 1024
	return s, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// summary is the min, median and max of a series.
type summary struct{ min, median, max float64 }

func summarize(xs []float64) summary {
	if len(xs) == 0 {
		return summary{}
	}
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	median := s[n/2]
	if n%2 == 0 {
		median = (s[n/2-1] + s[n/2]) / 2
	}
	return summary{s[0], median, s[n-1]}
}

// series maps the job's samples to numbers.
func (j *job) series(f func(sample) float64) []float64 {
	xs := make([]float64, len(j.samples))
	for i, s := range j.samples {
		xs[i] = f(s)
	}
	return xs
}

func (j *job) wall() summary {
	return summarize(j.series(func(s sample) float64 { return s.wall.Seconds() }))
}

func (j *job) cpu() summary {
	return summarize(j.series(func(s sample) float64 { return s.cpu.Seconds() }))
}

func (j *job) rss() summary {
	return summarize(j.series(func(s sample) float64 { return float64(s.rss) }))
}

// roundRatios are the per-round ratios of a's wall time to b's: both ran in
// the same round, under the same load.
func roundRatios(a, b *job) summary {
	n := min(len(a.samples), len(b.samples))
	xs := make([]float64, n)
	for i := range n {
		xs[i] = a.samples[i].wall.Seconds() / b.samples[i].wall.Seconds()
	}
	return summarize(xs)
}
