package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	udiff "github.com/aymanbagabas/go-udiff"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/pki"
	"github.com/kubeboot/kubeboot/templates"
)

// The kinds of file a Difference is about.
const (
	KindManifest        = "manifest"
	KindPKI             = "pki"
	KindKubeletConfig   = "kubelet-config"
	KindAPIServerConfig = "apiserver-config"
	// KindAddon is a cluster object of the addons, not a file.
	KindAddon = "addon"
	// KindUserObject is a cluster object of the user's own manifests
	// (addons.manifests).
	KindUserObject = "user-object"
)

// The changes init would make to a file.
const (
	ChangeCreate = "create"
	ChangeUpdate = "update"
	// ChangeRenew is an existing certificate or kubeconfig that init
	// --renew (or certs renew) would re-issue.
	ChangeRenew = "renew"
	// ChangeWrong is an existing file that needs a human: init fails on it.
	ChangeWrong = "wrong"
)

// Difference is one file that init would change on this node, or one
// object of the addons or of the user's manifests it would change in the
// cluster.
type Difference struct {
	// Path is the file's node path; for an object, its kind and
	// namespace/name, such as "Deployment kube-system/coredns".
	Path string `json:"path"`
	// Kind is one of the Kind constants.
	Kind string `json:"kind"`
	// Change is one of the Change constants.
	Change string `json:"change"`
	// Reason says why a certificate or kubeconfig is renewed or wrong.
	Reason string `json:"reason,omitempty"`
	// Diff is a unified diff of the current and the wanted content. It is
	// never set for PKI files, so no key material is ever shown.
	Diff string `json:"diff,omitempty"`
}

// Diff computes, in memory, what init would change on this node: the
// manifests, the kubelet and API server configuration files, and the
// certificates, keys and kubeconfigs. It writes no file. A node whose etcd
// joined a cluster renders etcd with the membership it joined with
// (s.Membership, see phases.ReadEtcdMembership).
func Diff(s *phases.Node) ([]Difference, error) {
	var out []Difference
	text, err := wantedTextFiles(s)
	if err != nil {
		return nil, err
	}
	for _, f := range text {
		d, err := diffFile(s, f.kind, f.path, f.data)
		if err != nil {
			return nil, err
		}
		if d != nil {
			out = append(out, *d)
		}
	}
	secrets, err := diffPKI(s)
	if err != nil {
		return nil, err
	}
	return append(out, secrets...), nil
}

// wantedFile is a file init renders whose content may be shown.
type wantedFile struct {
	kind, path string
	data       []byte
}

// wantedTextFiles renders the manifests (patched, as the etcd and
// control-plane phases do), the kubelet configuration and the API server's
// policy files. None of them holds key material.
func wantedTextFiles(s *phases.Node) ([]wantedFile, error) {
	manifests, err := phases.RenderPods(s)
	if err != nil {
		return nil, err
	}
	var files []wantedFile
	for _, m := range manifests {
		data, err := templates.Marshal(m.Pod)
		if err != nil {
			return nil, err
		}
		files = append(files, wantedFile{KindManifest, s.Config.ManifestPath(m.Component), data})
	}
	kubelet, err := phases.KubeletConfiguration(s.Config)
	if err != nil {
		return nil, err
	}
	files = append(files, wantedFile{KindKubeletConfig, s.Config.Kubelet.ConfigFile, kubelet})
	apiFiles, err := templates.APIServerFiles(s.Config)
	if err != nil {
		return nil, err
	}
	for _, f := range apiFiles {
		files = append(files, wantedFile{KindAPIServerConfig, f.Path, f.Data})
	}
	return files, nil
}

// DiffNode is `kubeboot diff`'s whole comparison: the node's files
// (Diff), then the addons and the user's manifests against the running
// cluster (DiffAddons). A render for another machine (offline: --root)
// and a node without a running control plane have no cluster to compare
// with: it says so and compares no addon; neither does an API server that
// does not answer within addonDiffTimeout, which is a warning, not a
// failure. A manifest of addons.manifests that init would refuse fails
// the diff, exit 2, as init would.
func DiffNode(ctx context.Context, s *phases.Node, offline bool) ([]Difference, error) {
	diffs, err := Diff(s)
	if err != nil || offline {
		return diffs, err
	}
	path := s.Config.KubeconfigPath(config.KubeconfigSuperAdmin)
	if _, err := os.Stat(s.Files.HostPath(path)); errors.Is(err, fs.ErrNotExist) {
		s.Report.Infof("addons not compared: no %s, so no cluster to compare with", path)
		return diffs, nil
	}
	ctx, cancel := context.WithTimeout(ctx, addonDiffTimeout)
	defer cancel()
	addons, err := DiffAddons(ctx, s)
	if exit.Code(err) == exit.Usage {
		return nil, err
	}
	if err != nil {
		s.Report.Warnf("addons not compared: %v", err)
		return diffs, nil
	}
	return append(diffs, addons...), nil
}

// addonDiffTimeout bounds the addons' comparison, so that a node whose
// API server is down still gets its files' diff promptly.
const addonDiffTimeout = 15 * time.Second

// DiffAddons computes, by server-side dry runs against the running
// cluster, what the addon phase would change: each object of the addons
// (KindAddon), then of the user's manifests (KindUserObject), that would be
// created, updated or replaced, with a unified diff of its live and wanted
// forms (status and server bookkeeping left out).
func DiffAddons(ctx context.Context, s *phases.Node) ([]Difference, error) {
	addons, err := phases.AddonDrift(ctx, s)
	if err != nil {
		return nil, err
	}
	user, err := phases.ManifestsDrift(ctx, s)
	if err != nil {
		return nil, err
	}
	return append(differences(KindAddon, addons), differences(KindUserObject, user)...), nil
}

// differences are drifts as Differences of kind.
func differences(kind string, drifts []phases.Drift) []Difference {
	var out []Difference
	for _, d := range drifts {
		diff := Difference{Path: d.Object, Kind: kind, Change: ChangeUpdate,
			Diff: udiff.Unified(d.Object+" (live)", d.Object+" (wanted)", string(d.Live), string(d.Wanted))}
		switch {
		case d.Live == nil:
			diff.Change, diff.Diff = ChangeCreate, udiff.Unified("/dev/null", d.Object, "", string(d.Wanted))
		case d.Replace:
			diff.Reason = "a field the API server does not change in place differs: the addon phase deletes and recreates it"
		}
		out = append(out, diff)
	}
	return out
}

// diffFile compares a wanted file with the disk; nil means no change.
func diffFile(s *phases.Node, kind, path string, want []byte) (*Difference, error) {
	current, err := s.Files.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &Difference{Path: path, Kind: kind, Change: ChangeCreate, Diff: udiff.Unified("/dev/null", path, "", string(want))}, nil
	case err != nil:
		return nil, fmt.Errorf("read %q: %w", path, err)
	case bytes.Equal(current, want):
		return nil, nil
	}
	return &Difference{Path: path, Kind: kind, Change: ChangeUpdate, Diff: udiff.Unified(path, path+" (wanted)", string(current), string(want))}, nil
}

// diffPKI lists the certificates, keys and kubeconfigs init would create,
// and asks pki.Ensure, which checks every existing one, what is wrong with
// the others. The material Ensure generates is thrown away.
func diffPKI(s *phases.Node) ([]Difference, error) {
	c := s.Config
	have, err := phases.ReadPKI(s)
	if err != nil {
		return nil, err
	}
	var out []Difference
	create := func(path string) {
		out = append(out, Difference{Path: path, Kind: KindPKI, Change: ChangeCreate})
	}
	for _, spec := range pki.CertSpecs(c) {
		pair := have.Certs[spec.Name]
		if len(pair.Cert) > 0 {
			continue
		}
		create(c.CertPath(spec.Name))
		if len(pair.Key) == 0 {
			create(c.KeyPath(spec.Name))
		}
	}
	if len(have.ServiceAccount.Private) == 0 {
		create(c.KeyPath(config.KeyServiceAccount))
		create(c.PublicKeyPath(config.KeyServiceAccount))
	}
	for _, name := range pki.KubeconfigNames(c) {
		if len(have.Kubeconfigs[name]) == 0 {
			create(c.KubeconfigPath(name))
		}
	}
	if config.On(c.Security.EncryptionAtRest.Enabled) {
		if _, err := s.Files.ReadFile(c.EncryptionConfigPath()); errors.Is(err, fs.ErrNotExist) {
			create(c.EncryptionConfigPath())
		}
	}
	if _, err := pki.Ensure(c, have, time.Now(), nil); err != nil {
		for _, e := range phases.LeafErrors(err) {
			var check *pki.CheckError
			if !errors.As(e, &check) {
				return nil, fmt.Errorf("check certificates in %q: %w", c.Certificates.Dir, e)
			}
			change := ChangeWrong
			if check.Renewable {
				change = ChangeRenew
			}
			out = append(out, Difference{Path: pkiPath(c, check.File), Kind: KindPKI, Change: change, Reason: strings.Join(check.Problems, "; ")})
		}
	}
	return addKeyMismatches(c, out, pki.KeyMismatches(c, have, nil)), nil
}

// addKeyMismatches adds each certificate or kubeconfig whose key is of
// another algorithm than the configured one, which init never changes, as
// a renewal; one already listed gets the reason added to its own.
func addKeyMismatches(c *config.ClusterConfiguration, diffs []Difference, mismatches []pki.KeyMismatch) []Difference {
	for _, m := range mismatches {
		path, reason := pkiPath(c, m.File), phases.KeyMismatchReason(m)
		i := slices.IndexFunc(diffs, func(d Difference) bool { return d.Path == path })
		if i < 0 {
			diffs = append(diffs, Difference{Path: path, Kind: KindPKI, Change: ChangeRenew, Reason: reason})
			continue
		}
		diffs[i].Reason += "; " + reason
	}
	return diffs
}

// pkiPath maps a CheckError's file name to its node path: kubeconfigs live
// in the kubeconfig directory, everything else under the certificates one.
func pkiPath(c *config.ClusterConfiguration, file string) string {
	if strings.HasSuffix(file, ".conf") {
		return c.KubeconfigPath(file)
	}
	return filepath.Join(c.Certificates.Dir, file)
}
