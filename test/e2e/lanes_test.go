//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/lab"
)

// The suite's lab tests run side by side in lanes: most of a lab test's
// time is waiting for Kubernetes, so labs overlap well even on two cores.
// What bounds them is not the CPU but the host's inotify instances: every
// kubelet, API server, controller-manager and systemd of every machine
// holds some, all of them root's, and the host allows root
// fs.inotify.max_user_instances of them (128 by default). A machine whose
// containerd cannot get one starts without the CRI. So each lab test
// says how many its machines hold at their peak, and the lanes admit a
// test only while the sum fits under the host's limit: the costliest
// waiting test that fits first, so that the longest is not left to run
// alone at the end. `make e2e` runs the suite with -parallel high enough
// that every test reaches the lanes; KUBEBOOT_E2E_LANES=1 runs the tests
// one at a time. The suite never changes the host's limit.

// A lab test's cost: its seconds alone on a 2-core machine, and the inotify
// instances its machines hold at their peak (a control-plane machine about
// 30, a worker about 13, counted on the lab's machines).
type labCost struct{ seconds, inotify int }

// controlPlane and worker are the inotify instances of one machine.
const controlPlane, worker = 30, 13

// testCosts are the suite's lab tests' costs.
var testCosts = map[string]labCost{
	"TestHAControlPlane":              {356, 4 * controlPlane},
	"TestAddons":                      {213, controlPlane + 2*worker},
	"TestUpgradeMinor":                {149, controlPlane},
	"TestMachines":                    {139, controlPlane + 2*worker},
	"TestClusterLife":                 {133, 2*controlPlane + 2*worker},
	"TestDay2":                        {111, controlPlane},
	"TestLabKnobs":                    {62, controlPlane + worker},
	"TestPodNetwork":                  {60, controlPlane + worker},
	"TestDualStackLab":                {60, controlPlane + worker},
	"TestEmptyDiskFleet":              {30, controlPlane + 2*worker},
	"TestKubeadmJoinsTheControlPlane": {60, 2 * controlPlane},
	"TestLabUpDownUp":                 {60, controlPlane},
	"TestSecurityHardening":           {50, controlPlane},
	"TestCrashAndConverge":            {50, controlPlane},
	"TestClusterObjects":              {45, controlPlane},
	"TestUpgradeKubeadmView":          {45, controlPlane + worker},
	"TestKubeadmInit":                 {40, controlPlane},
	"TestControlPlane":                {35, controlPlane},
	"TestIsolation":                   {30, controlPlane},
	"TestDryRun":                      {25, controlPlane},
}

// maxLanes is how many lab tests run at once at most, the inotify
// instances permitting.
const maxLanes = 3

// inotifyMargin is kept free of the host's limit for what the suite and
// kubeboot's own commands hold meanwhile.
const inotifyMargin = 12

// settle is how long the lanes wait after the first test arrives before
// admitting any, so that every test released at once is there to be
// ordered.
const settle = time.Second

// lanes admits lab tests while their inotify instances fit, at most
// lanes of them at once, the costliest that fits first.
type lanes struct {
	mu   sync.Mutex
	cond *sync.Cond
	// lanes is how many tests may run at once; capacity is the inotify
	// instances they may hold together.
	lanes, capacity int
	running         []labCost
	waiting         []*labCost
	settled         bool
}

// suiteLanes are the suite's lanes.
var suiteLanes = newLanes()

// newLanes makes the lanes: KUBEBOOT_E2E_LANES of them (maxLanes by
// default), with the host's free inotify instances as their capacity.
func newLanes() *lanes {
	n := maxLanes
	if v := os.Getenv("KUBEBOOT_E2E_LANES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			panic(fmt.Sprintf("KUBEBOOT_E2E_LANES=%q: want a number of lanes, 1 or more", v))
		}
	}
	l := &lanes{lanes: n, capacity: freeInotifyInstances() - inotifyMargin}
	l.cond = sync.NewCond(&l.mu)
	return l
}

// freeInotifyInstances is how many more inotify instances root may hold:
// the host's limit less the ones its processes hold now.
func freeInotifyInstances() int {
	limit, held, ok, err := lab.HostInotify()
	if err != nil || !ok {
		panic(fmt.Sprintf("the host's inotify limit: %v (none: %t)", err, !ok))
	}
	return limit - held
}

// alongside runs the test in a lane beside the suite's other lab tests:
// it returns once the test is admitted, and the lane is freed once the
// test and all its cleanups are done. Every test that calls it has a
// cost in testCosts.
func alongside(t *testing.T) {
	t.Helper()
	cost, ok := testCosts[t.Name()]
	if !ok {
		t.Fatalf("%s has no cost in testCosts: measure it alone and add it", t.Name())
	}
	t.Parallel()
	sharedRunDirs.make(t)
	queued := time.Now()
	suiteLanes.acquire(&cost)
	admitted := time.Now()
	// First registered, so run last. Go counts a parallel test's time
	// from its start, its wait for a lane included: this says both.
	t.Cleanup(func() {
		suiteLanes.release(cost)
		t.Logf("TIMING: in its lane %s, after waiting %s for it", time.Since(admitted).Round(100*time.Millisecond), admitted.Sub(queued).Round(100*time.Millisecond))
	})
}

// acquire waits until c is the test to admit: the costliest waiting one
// whose instances fit beside the running tests', or, when nothing runs,
// the costliest waiting one.
func (l *lanes) acquire(c *labCost) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.waiting) == 0 && !l.settled {
		time.AfterFunc(settle, func() {
			l.mu.Lock()
			l.settled = true
			l.mu.Unlock()
			l.cond.Broadcast()
		})
	}
	l.waiting = append(l.waiting, c)
	for !l.settled || l.next() != c {
		l.cond.Wait()
	}
	l.waiting = slices.DeleteFunc(l.waiting, func(w *labCost) bool { return w == c })
	l.running = append(l.running, *c)
	l.cond.Broadcast()
}

// next is the waiting test to admit now, or nil.
func (l *lanes) next() *labCost {
	if len(l.running) >= l.lanes {
		return nil
	}
	held := 0
	for _, r := range l.running {
		held += r.inotify
	}
	var best *labCost
	for _, w := range l.waiting {
		fits := len(l.running) == 0 || held+w.inotify <= l.capacity
		if fits && (best == nil || w.seconds > best.seconds) {
			best = w
		}
	}
	return best
}

func (l *lanes) release(c labCost) {
	l.mu.Lock()
	l.running = slices.Delete(l.running, slices.Index(l.running, c), slices.Index(l.running, c)+1)
	l.mu.Unlock()
	l.cond.Broadcast()
}

// sharedRunDirs are the directories of /run that the labs running side by
// side share: ip netns's /run/netns and systemd-nspawn's /run/systemd. A
// lab that makes one removes it when it comes down, or hands its removal
// to another lab that is up and registered, which races with the labs
// that come and go side by side. So the suite makes the
// ones the host lacks before the lab tests run side by side, and removes
// them, once empty, after the last (removeSharedRunDirs).
var sharedRunDirs = &runDirs{paths: []string{"/run/netns", "/run/systemd"}}

// runDirs are directories the suite makes once, if the host lacks them.
type runDirs struct {
	once  sync.Once
	paths []string
	made  []string
}

// make makes the directories the host lacks, once.
func (d *runDirs) make(t *testing.T) {
	d.once.Do(func() {
		for _, p := range d.paths {
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				continue
			}
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
			d.made = append(d.made, p)
		}
	})
}

// remove removes the directories the suite made, once empty: ip netns
// makes /run/netns a mount point of its own, so each is unmounted first.
func (d *runDirs) remove() {
	for _, p := range d.made {
		if entries, err := os.ReadDir(p); err == nil && len(entries) == 0 {
			_ = syscall.Unmount(p, syscall.MNT_DETACH)
			_ = os.Remove(p)
		}
	}
}
