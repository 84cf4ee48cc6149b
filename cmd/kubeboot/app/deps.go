package app

import (
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
)

// deps are what the commands take from outside their flags and
// arguments, as gh's Factory: Main builds them once, tests with their
// fakes, and each command constructor is handed them. No command reads or
// swaps a package variable.
type deps struct {
	// version is this binary's release: `kubeboot version` prints it, and
	// kubeboot's own pods carry it (system.Kubeboot).
	version versionInfo
	// adminClient builds the API client of the commands that talk to the
	// cluster as its administrator (token, upgrade plan) from admin.conf.
	adminClient func(kubeconfig []byte) (kubernetes.Interface, error)
	// interruptGrace is how long a run has, after SIGINT or SIGTERM, to
	// stop on its own before execute gives up on it. Every wait of the
	// steps watches the context, but a step blocked in a system call, such
	// as the open of a FIFO where a file was expected, cannot.
	interruptGrace time.Duration
	// cpuProfile is this run's CPU profile file, or "" (see cpuProfileEnv).
	cpuProfile string
	// system is how kubelet-start reaches systemd and finds the kubelet,
	// and the kubeboot binary kubeboot's own pods run.
	system workflow.System
}

// defaultInterruptGrace is a real run's interruptGrace.
const defaultInterruptGrace = 5 * time.Second

// newDeps are the dependencies of a real run, with this run's CPU profile.
func newDeps(cpuProfile string) deps {
	v := currentVersion()
	return deps{
		version: v,
		adminClient: func(kubeconfig []byte) (kubernetes.Interface, error) {
			return phases.NewClient(kubeconfig, "")
		},
		interruptGrace: defaultInterruptGrace,
		cpuProfile:     cpuProfile,
		system:         workflow.HostSystem(v.Version),
	}
}

// configEnv is what loading a configuration of one of kinds (none: any
// kind) needs besides the file: this machine.
func (d deps) configEnv(kinds ...string) config.Env {
	return config.Env{Host: config.DetectHost(), Kinds: kinds}
}
