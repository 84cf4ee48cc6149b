package main

import (
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/internal/startup"
)

// TestNoCollectionWhilePackagesInitialize runs this test binary, which
// links every package kubeboot does, again with the runtime tracing its
// package initializers and its garbage collections: startup must
// initialize before client-go's scheme, the largest of them, and no
// collection may run before the last initializer has.
func TestNoCollectionWhilePackagesInitialize(t *testing.T) {
	if os.Getenv("KUBEBOOT_TEST_CHILD") != "" {
		return // the child: its initializers ran, traced
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestNoCollectionWhilePackagesInitialize$")
	cmd.Env = append(os.Environ(), "KUBEBOOT_TEST_CHILD=1", "GODEBUG=inittrace=1,gctrace=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var order []string
	firstGC, lastInit := -1, -1
	lines := strings.Split(string(out), "\n")
	for i, line := range lines {
		fields := strings.Fields(line)
		switch {
		case len(fields) > 1 && fields[0] == "init":
			order = append(order, fields[1])
			lastInit = i
		case len(fields) > 1 && fields[0] == "gc" && firstGC < 0:
			firstGC = i
		}
	}
	pos := func(pkg string) int {
		for i, p := range order {
			if p == pkg {
				return i
			}
		}
		t.Fatalf("no initializer of %s in the trace:\n%s", pkg, out)
		return -1
	}
	if pos("github.com/kubeboot/kubeboot/internal/startup") > pos("k8s.io/client-go/kubernetes/scheme") {
		t.Error("startup initialized after client-go's scheme")
	}
	if firstGC >= 0 && firstGC < lastInit {
		t.Errorf("a collection ran while packages initialized, before %s: %s", order[len(order)-1], lines[firstGC])
	}
}

// TestDoneRestoresGOGC checks that Done gives the collector back GOGC's
// setting, 100 when it is unset.
func TestDoneRestoresGOGC(t *testing.T) {
	want := 100
	switch v := os.Getenv("GOGC"); {
	case v == "off":
		want = -1
	case v != "":
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("GOGC=%s: %v", v, err)
		}
		want = n
	}
	startup.Done()
	if got := debug.SetGCPercent(want); got != want {
		t.Errorf("after Done the collector's percent is %d, want %d", got, want)
	}
}
