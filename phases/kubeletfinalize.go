package phases

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/pki"
)

// KubeletFinalize points kubelet.conf at the client certificate the
// kubelet rotates, as kubeadm's kubelet-finalize does. The kubelet runs
// with rotateCertificates and starts from the certificate kubeboot
// embedded in kubelet.conf: it copies it to
// <kubelet.certDir>/kubelet-client-current.pem and renews it through the
// cluster; kubelet.conf, which it reads at each start, would keep the
// embedded certificate, which expires a year after init
// (kubernetes#99645). Once that file holds this node's certificate of this
// cluster, kubelet.conf names it; if it never does, kubelet.conf stays as
// it is, with a warning.
var KubeletFinalize = workflow.Phase[*Node]{
	Name:     "kubelet-finalize",
	Short:    "Point kubelet.conf at the client certificate the kubelet rotates",
	LiveOnly: true,
	Run:      runKubeletFinalize,
}

// kubeletFinalizeWait bounds the wait for the kubelet's pair, unless
// timeouts.controlPlane is shorter. The kubelet writes it when it starts,
// and it has run the control plane by the time this phase runs: a pair
// still missing after this long is not coming.
const kubeletFinalizeWait = time.Minute

// kubeletPairPoll is how often kubelet-finalize reads the kubelet's pair:
// a file the kubelet writes, with nothing to watch it through.
const kubeletPairPoll = 500 * time.Millisecond

func runKubeletFinalize(ctx context.Context, s *Node) error {
	c := s.Config
	path := c.KubeconfigPath(config.KubeconfigKubelet)
	have, err := ReadPKI(s)
	if err != nil {
		return err
	}
	caCert := have.Certs[config.CertCA].Cert
	if len(have.Kubeconfigs[config.KubeconfigKubelet]) == 0 || len(caCert) == 0 {
		return fmt.Errorf("%s or %s not found: run `kubeboot init phase certs` and `kubeboot init phase kubeconfig` first", path, c.CertPath(config.CertCA))
	}
	spec, current := kubeletKubeconfig(c), kubeletConfNow(c, have)
	switch rotate, set := c.Kubelet.ExtraConfig["rotateCertificates"].(bool); {
	case current.File != "" && pki.CheckKubeconfig(spec, have.Kubeconfigs[spec.Name], caCert, have.ClientFiles, time.Now(), 0) == nil:
		s.Report.Infof("%s names %s, the client certificate the kubelet rotates (expires %s)", path, current.File, day(current.NotAfter))
		return nil
	case set && !rotate:
		s.Report.Warnf("kubelet.extraConfig sets rotateCertificates to false, so the kubelet renews no certificate: %s %s; "+
			"renew it before then with `kubeboot certs renew kubelet.conf` and restart the kubelet", path, describeKubeletConf(current))
		return nil
	}
	pair := filepath.Join(c.Kubelet.CertDir, pki.KubeletClientFile)
	if err := waitKubeletPair(ctx, s, spec, pair, caCert); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("wait for %q: %w", pair, ctx.Err())
		}
		s.Report.Warnf("%v, %s, so %s %s: is the kubelet running with --cert-dir %s (kubelet.certDir) and rotateCertificates? "+
			"Once it is, `kubeboot init phase kubelet-finalize` points kubelet.conf at its certificate", err, timeoutText(c), path, describeKubeletConf(current), c.Kubelet.CertDir)
		return nil
	}
	return writeFinalized(s, spec, caCert, pair)
}

// writeFinalized writes kubelet.conf for spec, trusting caCert, with a
// user that names pair, the kubelet's.
func writeFinalized(s *Node, spec pki.KubeconfigSpec, caCert []byte, pair string) error {
	data, err := pki.RotatedKubeconfig(spec, caCert, pair)
	if err != nil {
		return err
	}
	path := s.Config.KubeconfigPath(spec.Name)
	if err := s.Files.WriteFile(path, data, pki.ModeKubeconfig); err != nil {
		return err
	}
	s.Report.Infof("%s now names %s, the client certificate the kubelet rotates", path, pair)
	return nil
}

// kubeletKubeconfig is the spec of kubelet.conf.
func kubeletKubeconfig(c *config.ClusterConfiguration) pki.KubeconfigSpec {
	specs := pki.KubeconfigSpecs(c)
	return specs[slices.IndexFunc(specs, func(k pki.KubeconfigSpec) bool { return k.KubeletRotates })]
}

// kubeletConfNow is the expiration of kubelet.conf's client certificate,
// as the node has it.
func kubeletConfNow(c *config.ClusterConfiguration, have pki.Set) pki.Expiration {
	return pki.KubeletExpiration(c, have, time.Now())
}

// describeKubeletConf says which client certificate kubelet.conf holds and
// when it expires.
func describeKubeletConf(e pki.Expiration) string {
	what := "keeps the client certificate kubeboot embedded"
	if e.File != "" {
		what = "names " + e.File
	}
	switch {
	case e.Err != nil:
		return what + ", which cannot be read: " + e.Err.Error()
	case e.Missing:
		return what + ", which is missing"
	}
	return what + ", which expires " + day(e.NotAfter)
}

// waitKubeletPair waits until the kubelet's pair file holds this node's
// client certificate of this cluster, with its key; its error says what
// was wrong last.
func waitKubeletPair(ctx context.Context, s *Node, spec pki.KubeconfigSpec, pair string, caCert []byte) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, kubeletPairPoll, finalizeTimeout(s.Config), true, func(context.Context) (bool, error) {
		data, err := s.Files.ReadFile(pair)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			last = fmt.Errorf("%s does not exist", pair)
			return false, nil
		case err != nil:
			last = fmt.Errorf("read %q: %w", pair, err)
			return false, nil
		}
		last = pki.CheckRotatedPair(spec, pair, data, caCert, time.Now())
		return last == nil, nil
	})
	if err != nil && last != nil {
		return last
	}
	return err
}

// finalizeTimeout is how long kubelet-finalize waits for the kubelet's
// pair.
func finalizeTimeout(c *config.ClusterConfiguration) time.Duration {
	return min(kubeletFinalizeWait, c.Timeouts.ControlPlane.Duration)
}

// timeoutText says how long kubelet-finalize waited, and what set it.
func timeoutText(c *config.ClusterConfiguration) string {
	if d := finalizeTimeout(c); d < kubeletFinalizeWait {
		return "still so after " + d.String() + " (timeouts.controlPlane)"
	}
	return "still so after " + kubeletFinalizeWait.String()
}
