package health

import (
	"context"
	"crypto/tls"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/inputfile"
	"github.com/kubeboot/kubeboot/pki"
)

// dialTimeout bounds one connection attempt, so that a member that is down
// fails fast instead of using up a whole check.
const dialTimeout = time.Second

// Probe checks one component.
type Probe struct {
	// Component is the component's name.
	Component string
	// Target is what is checked, for people: "https://10.0.0.1:6443/livez, /readyz".
	Target string
	// External marks a component that does not run on this node.
	External bool
	// Check returns nil when the component is healthy, else an error that
	// is (or joins) *ProbeError values. It must return when ctx is done.
	Check func(ctx context.Context) error
}

// Probes builds a probe for every control-plane component from the decoded
// manifests (see Targets). hostPath maps a node path to the path where this
// process finds the file, for runs under a root prefix; nil means the
// identity. It fails when a CA or client certificate cannot be loaded,
// since waiting would not fix that.
func Probes(cfg *config.ClusterConfiguration, pods map[string]*corev1.Pod, hostPath func(string) string) ([]Probe, error) {
	targets, err := Targets(cfg, pods)
	if err != nil {
		return nil, err
	}
	probes := make([]Probe, 0, len(targets))
	for _, t := range targets {
		p, err := NewProbe(t, hostPath)
		if err != nil {
			return nil, err
		}
		probes = append(probes, p)
	}
	return probes, nil
}

// NewProbe loads the target's TLS files through hostPath (nil: the
// identity) and returns its probe: etcd is checked through its client API,
// every other component through HTTPS GETs of its paths.
func NewProbe(t Target, hostPath func(string) string) (Probe, error) {
	if hostPath == nil {
		hostPath = func(p string) string { return p }
	}
	files := tlsFiles{ca: hostFile(t.CAFile, hostPath), cert: hostFile(t.CertFile, hostPath),
		key: hostFile(t.KeyFile, hostPath), serverCert: hostFile(t.ServerCertFile, hostPath)}
	tlsConfig, err := loadTLS(files)
	if err != nil {
		return Probe{}, fmt.Errorf("build %s probe: %w", t.Component, err)
	}
	p := Probe{Component: t.Component, Target: t.String(), External: t.External}
	if len(t.Paths) == 0 {
		p.Check = (&etcdCheck{endpoints: t.Endpoints, tls: tlsConfig, files: files}).check
	} else {
		p.Check = newHTTPSCheck(t, tlsConfig, files).check
	}
	return p, nil
}

// hostFile maps a node path to a host path, keeping "" for no file.
func hostFile(path string, hostPath func(string) string) string {
	if path == "" {
		return ""
	}
	return hostPath(path)
}

// loadTLS builds the client TLS configuration: the CA pool that verifies
// servers (nil: the system roots) and the client certificate, if any.
func loadTLS(files tlsFiles) (*tls.Config, error) {
	var caPEM, certPEM, keyPEM []byte
	var err error
	if files.ca != "" {
		if caPEM, err = inputfile.Read(files.ca, inputfile.PEMLimit); err != nil {
			return nil, fmt.Errorf("read CA %q: %w", files.ca, err)
		}
	}
	if files.cert != "" {
		if certPEM, err = inputfile.Read(files.cert, inputfile.PEMLimit); err != nil {
			return nil, fmt.Errorf("load client certificate %q: %w", files.cert, err)
		}
		if keyPEM, err = inputfile.Read(files.key, inputfile.PEMLimit); err != nil {
			return nil, fmt.Errorf("load client certificate key %q: %w", files.key, err)
		}
	}
	cfg, err := pki.ClientTLS(caPEM, certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load client TLS (CA %q, certificate %q): %w", files.ca, files.cert, err)
	}
	return cfg, nil
}
