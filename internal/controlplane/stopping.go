package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubeboot/kubeboot/internal/cri"
	"github.com/kubeboot/kubeboot/internal/procnet"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
)

// pollInterval is how often reset looks whether a component has stopped.
const pollInterval = 250 * time.Millisecond

// stopping is a set of components whose manifests go: the addresses they
// listen on, the processes that listened there before the manifests went
// (those may close their sockets well before they exit), and their static
// pods in the node's container runtime (a component between two restarts
// listens nowhere, yet the kubelet may be starting it again).
type stopping struct {
	listeners []phases.Listener
	procs     []stoppingProcess
	// pods are the components' static pods, as the runtime names them.
	pods []string
	// runtime is the node's container runtime endpoint.
	runtime string
}

// stoppingProcess is one component's process.
type stoppingProcess struct {
	component string
	process   procnet.Process
}

// stoppingNow records the processes listening on the listeners' addresses;
// call it before the manifests go. When it cannot see them, it says so:
// the wait then covers the ports alone.
func stoppingNow(s *phases.Node, listeners []phases.Listener) stopping {
	st := stopping{listeners: listeners, runtime: s.Config.Kubelet.ContainerRuntimeEndpoint}
	for _, name := range st.components() {
		st.pods = append(st.pods, name+"-"+s.Config.Node.Name)
	}
	for _, l := range listeners {
		port, err := strconv.Atoi(l.Port)
		if err != nil {
			continue
		}
		p, err := procnet.Listener(dialHost(l.Host), port)
		if errors.Is(err, procnet.ErrNotVisible) {
			s.Report.Warnf("%s: %v; waiting for its port to close only", l.Component, err)
		}
		if err == nil && !slices.ContainsFunc(st.procs, func(sp stoppingProcess) bool { return sp.process == p }) {
			st.procs = append(st.procs, stoppingProcess{l.Component, p})
		}
	}
	return st
}

// waitStopped waits until the kubelet has stopped the components whose
// manifests went: nothing listens on their addresses any more, their
// processes have exited and the runtime holds no ready sandbox of their
// pods, so no file is pulled from under a component that is still shutting
// down, and none starts again once the kubelet is stopped. A node whose
// runtime does not answer the CRI's list of sandboxes is waited for by its
// ports and processes alone. A timeout names what still runs.
func waitStopped(ctx context.Context, s *workflow.Run, st stopping, timeout time.Duration) error {
	s.Report.Infof("waiting for the kubelet to stop %s", strings.Join(st.components(), ", "))
	var runtime *cri.Client
	if st.runtime != "" {
		if r, err := cri.Dial(st.runtime, s.Files.HostPath); err == nil {
			runtime = r
			defer func() { _ = r.Close() }()
		}
	}
	var running []string
	err := wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		running = openListeners(st.listeners)
		for _, sp := range st.procs {
			if sp.process.Running() {
				running = append(running, fmt.Sprintf("%s (%s)", sp.component, sp.process))
			}
		}
		if runtime != nil {
			pods, err := runtime.ReadyPods(ctx, st.pods)
			if err != nil {
				runtime = nil // it does not answer: the ports and processes tell
			}
			for _, pod := range pods {
				running = append(running, "static pod "+pod)
			}
		}
		return len(running) == 0, nil
	})
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("wait for the components to stop: %w (still running: %s)", ctx.Err(), strings.Join(running, ", "))
	}
	if err != nil {
		return fmt.Errorf("wait for the components to stop: still running after %s: %s (is the kubelet running? it stops static pods whose manifest is gone)", timeout, strings.Join(running, ", "))
	}
	return nil
}

// components names the stopping components once each, in order.
func (st stopping) components() []string {
	var names []string
	for _, l := range st.listeners {
		if !slices.Contains(names, l.Component) {
			names = append(names, l.Component)
		}
	}
	return names
}

// dialHost is where a listener bound to host is reached: its own address,
// or the loopback address for a wildcard.
func dialHost(host string) string {
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return "127.0.0.1"
	}
	return host
}

// openListeners lists the listeners that still accept connections.
func openListeners(listeners []phases.Listener) []string {
	var open []string
	for _, l := range listeners {
		addr := net.JoinHostPort(dialHost(l.Host), l.Port)
		conn, err := net.DialTimeout("tcp", addr, pollInterval)
		if err == nil {
			_ = conn.Close()
			open = append(open, l.Component+" on "+addr)
		}
	}
	return open
}
