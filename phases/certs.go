package phases

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/files"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/pki"
)

// Certs converges the certificate authorities, certificates and keys.
var Certs = workflow.Phase[*Node]{
	Name:  "certs",
	Short: "Generate the certificate authorities, certificates and keys",
	Run: func(_ context.Context, s *Node) error {
		return ensurePKI(s, pki.CertNames(s.Config))
	},
}

// Kubeconfig converges the kubeconfig files.
var Kubeconfig = workflow.Phase[*Node]{
	Name:  "kubeconfig",
	Short: "Generate the kubeconfig files",
	Run: func(_ context.Context, s *Node) error {
		ca := s.Config.CertPath(config.CertCA)
		if _, err := s.Files.ReadFile(ca); errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s not found: run `kubeboot init phase certs` first", ca)
		}
		return ensurePKI(s, pki.KubeconfigNames(s.Config))
	},
}

// ensurePKI reuses every named file that is correct, creates the missing
// ones, and fails on wrong ones, naming each difference; with --renew it
// re-issues the wrong ones that a renewal fixes.
func ensurePKI(s *Node, names []string) error {
	have, err := ReadPKI(s)
	if err != nil {
		return err
	}
	if err := useConfiguredCA(s.Config, have); err != nil {
		return err
	}
	now := time.Now()
	created, err := pki.Ensure(s.Config, have, now, names)
	var renewed pki.Set
	if err != nil && s.Options.Renew {
		if wrong := renewableNames(err); wrong != nil {
			if renewed, err = pki.Renew(s.Config, have, now, wrong, false); err == nil {
				s.Report.Infof("renewed %s", strings.Join(wrong, ", "))
				s.Renewed = append(s.Renewed, wrong...)
				created, err = pki.Ensure(s.Config, merge(have, renewed), now, names)
			}
		}
	}
	if err != nil {
		if renewableNames(err) != nil {
			return fmt.Errorf("%w\n(re-run with --renew to replace these, or `kubeboot certs renew`)", err)
		}
		return err
	}
	set := merge(have, merge(renewed, created))
	if err := checkCAExpiry(s, set, names); err != nil {
		return err
	}
	warnKeyMismatches(s, set, names)
	warnKubeletRotation(s, set, names)
	return writePKI(s, names, set)
}

// useConfiguredCA puts certificates.ca into have when the node holds no
// cluster CA, and refuses a node whose CA (the first of its ca.crt) is
// another.
func useConfiguredCA(c *config.ClusterConfiguration, have pki.Set) error {
	ca := c.Certificates.CA
	if ca == nil {
		return nil
	}
	pair := have.Certs[config.CertCA]
	switch {
	case len(pair.Cert) == 0 && len(pair.Key) == 0:
		have.Certs[config.CertCA] = pki.KeyPair{Cert: []byte(ca.Cert), Key: []byte(ca.Key)}
	case !bytes.Equal(pki.First(pair.Cert), pki.First([]byte(ca.Cert))) || string(pair.Key) != ca.Key:
		// During a CA rotation the node's ca.crt holds two CAs, the one
		// with its key first.
		return &exit.UsageError{Msg: fmt.Sprintf("certificates.ca is another CA than the one in %s: this node belongs to another cluster. "+
			"Remove certificates.ca from the configuration to keep the node's CA, or `kubeboot reset` the node first", c.Certificates.Dir)}
	}
	return nil
}

// warnKubeletRotation warns, when kubelet.conf is among names and names
// the client certificate the kubelet rotates (finalized), that this
// certificate expires within the renewal window. Renewing it is
// the kubelet's work, so it is no reason to fail, but one this close to
// its end says that the kubelet's rotation may be failing.
func warnKubeletRotation(s *Node, set pki.Set, names []string) {
	if !slices.Contains(names, config.KubeconfigKubelet) {
		return // kubelet.conf is not among names: nothing to parse
	}
	window := s.Config.Certificates.RenewBefore.Duration
	e := pki.KubeletExpiration(s.Config, set, time.Now())
	if e.File == "" || e.Missing || e.Err != nil || e.Residual >= window {
		return
	}
	s.Report.Warnf("%s names %s, the client certificate the kubelet rotates, which expires %s, within the renewal window of %s: "+
		"if the kubelet does not replace it before then, see its log and its certificate signing requests (`kubectl get csr`)",
		s.Config.KubeconfigPath(e.Name), e.File, day(e.NotAfter), hours(window))
}

// warnKeyMismatches says which of the named certificates and kubeconfigs
// keep a key of another algorithm than certificates.keyAlgorithm, which
// only applies to new keys, and what re-keys them.
func warnKeyMismatches(s *Node, set pki.Set, names []string) {
	byChange := map[string][]string{}
	var changes []string
	for _, m := range pki.KeyMismatches(s.Config, set, names) {
		change := KeyMismatchReason(m)
		if byChange[change] == nil {
			changes = append(changes, change)
		}
		byChange[change] = append(byChange[change], m.File)
	}
	for _, change := range changes {
		s.Report.Warnf("%s: %s", strings.Join(byChange[change], ", "), change)
	}
}

// KeyMismatchReason says what is wrong with a key of another algorithm
// than the configured one, and what fixes it.
func KeyMismatchReason(m pki.KeyMismatch) string {
	return fmt.Sprintf("key is %s, certificates.keyAlgorithm is %s: init keeps existing keys; `kubeboot certs renew --new-keys` replaces them", m.Have, m.Want)
}

// checkCAExpiry warns about each CA among names (nil: every CA) that
// expires within the renewal window, or with --strict fails on it. The
// certificates such a CA issues expire with it, and pki.Check accepts them
// as they are, so without the warning nothing would say why they are short.
func checkCAExpiry(s *Node, set pki.Set, names []string) error {
	var errs []error
	for _, e := range pki.ExpiringCAs(s.Config, set, time.Now()) {
		if names != nil && !slices.Contains(names, e.Name) {
			continue
		}
		msg := fmt.Sprintf("%s expires %s, within the renewal window of %s: every certificate it issues expires with it, and no renewal extends them; "+
			"renew this CA with your own tooling, keeping its key, or re-create the cluster PKI (`kubeboot reset`, then `kubeboot init`) before then",
			s.Config.CertPath(e.Name), e.NotAfter.UTC().Format(time.DateOnly), hours(s.Config.Certificates.RenewBefore.Duration))
		if s.Options.Strict {
			errs = append(errs, fmt.Errorf("check CA %q (--strict): %s", e.Name, msg))
			continue
		}
		s.Report.Warnf("%s", msg)
	}
	return errors.Join(errs...)
}

// renewableNames returns the names behind err's check errors when a
// renewal fixes every one of them, else nil.
func renewableNames(err error) []string {
	var names []string
	for _, e := range LeafErrors(err) {
		var check *pki.CheckError
		if !errors.As(e, &check) || !check.Renewable {
			return nil
		}
		names = append(names, strings.TrimSuffix(check.File, ".crt"))
	}
	return names
}

// LeafErrors flattens errors.Join trees.
func LeafErrors(err error) []error {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range joined.Unwrap() {
			out = append(out, LeafErrors(e)...)
		}
		return out
	}
	return []error{err}
}

// merge overlays the non-empty material of top on base; the files that
// kubeconfigs name are base's, since nothing renews them.
func merge(base, top pki.Set) pki.Set {
	out := pki.Set{Certs: map[string]pki.KeyPair{}, Kubeconfigs: map[string][]byte{}, ServiceAccount: base.ServiceAccount, ClientFiles: base.ClientFiles}
	for _, set := range []pki.Set{base, top} {
		for name, pair := range set.Certs {
			cur := out.Certs[name]
			if len(pair.Cert) > 0 {
				cur.Cert = pair.Cert
			}
			if len(pair.Key) > 0 {
				cur.Key = pair.Key
			}
			out.Certs[name] = cur
		}
		for name, data := range set.Kubeconfigs {
			if len(data) > 0 {
				out.Kubeconfigs[name] = data
			}
		}
	}
	if len(top.ServiceAccount.Private) > 0 {
		out.ServiceAccount.Private = top.ServiceAccount.Private
	}
	if len(top.ServiceAccount.Public) > 0 {
		out.ServiceAccount.Public = top.ServiceAccount.Public
	}
	return out
}

// ReadPKI reads the node's certificates, keys and kubeconfigs, and the
// kubelet's pair file that kubelet.conf names once finalized; a missing
// file is an empty field.
func ReadPKI(s *Node) (pki.Set, error) {
	c := s.Config
	set := pki.Set{Certs: map[string]pki.KeyPair{}, Kubeconfigs: map[string][]byte{}}
	var err error
	read := func(path string) []byte {
		data, e := s.Files.ReadFile(path)
		if e != nil && !errors.Is(e, fs.ErrNotExist) && err == nil {
			err = fmt.Errorf("read %q: %w", path, e)
		}
		return data
	}
	for _, spec := range pki.CertSpecs(c) {
		set.Certs[spec.Name] = pki.KeyPair{Cert: read(c.CertPath(spec.Name)), Key: read(c.KeyPath(spec.Name))}
	}
	set.ServiceAccount = pki.ServiceAccountKey{
		Private: read(c.KeyPath(config.KeyServiceAccount)),
		Public:  read(c.PublicKeyPath(config.KeyServiceAccount)),
	}
	set.ClientFiles = map[string][]byte{}
	for _, k := range pki.KubeconfigSpecs(c) {
		set.Kubeconfigs[k.Name] = read(c.KubeconfigPath(k.Name))
		if k.KubeletRotates {
			for _, path := range pki.ClientFiles(set.Kubeconfigs[k.Name]) {
				set.ClientFiles[path] = read(path)
			}
		}
	}
	return set, err
}

// pkiFile is one file of a pki.Set with its node path and mode.
type pkiFile struct {
	path string
	data []byte
	mode fs.FileMode
}

// pkiFiles lists the non-empty files of set that belong to the named
// certificates, keys and kubeconfigs.
func pkiFiles(c *config.ClusterConfiguration, set pki.Set, names []string) []pkiFile {
	var files []pkiFile
	add := func(name, path string, data []byte, mode fs.FileMode) {
		if len(data) > 0 && slices.Contains(names, name) {
			files = append(files, pkiFile{path, data, mode})
		}
	}
	for _, spec := range pki.CertSpecs(c) {
		add(spec.Name, c.CertPath(spec.Name), set.Certs[spec.Name].Cert, pki.ModeCert)
		add(spec.Name, c.KeyPath(spec.Name), set.Certs[spec.Name].Key, pki.ModeKey)
	}
	add(config.KeyServiceAccount, c.KeyPath(config.KeyServiceAccount), set.ServiceAccount.Private, pki.ModeKey)
	add(config.KeyServiceAccount, c.PublicKeyPath(config.KeyServiceAccount), set.ServiceAccount.Public, pki.ModeCert)
	for _, name := range pki.KubeconfigNames(c) {
		add(name, c.KubeconfigPath(name), set.Kubeconfigs[name], pki.ModeKubeconfig)
	}
	return files
}

// writePKI makes the disk hold set: new material is written, keys before
// their certificates, and with the cluster CA its first certificate alone
// as ca-signer.crt (config.CertCASigner); unchanged files are left alone
// but a looser mode is tightened.
func writePKI(s *Node, names []string, set pki.Set) error {
	dirs := []string{s.Config.Certificates.Dir}
	if s.Config.Etcd.Local != nil {
		dirs = append(dirs, filepath.Dir(s.Config.CertPath(config.CertEtcdCA)))
	}
	for _, dir := range dirs {
		if err := s.Files.MkdirAll(dir, pki.ModeDir); err != nil {
			return err
		}
	}
	// A write killed midway leaves a dot temp file with part of a key.
	for _, dir := range append(dirs, s.Config.Paths.KubeconfigDir) {
		if _, err := files.RemoveTempFiles(s.Files, dir); err != nil {
			return err
		}
	}
	files := pkiFiles(s.Config, set, names)
	if ca := set.Certs[config.CertCA].Cert; slices.Contains(names, config.CertCA) && len(ca) > 0 {
		// The controller-manager's signing certificate, written after
		// ca.crt: the first of it.
		files = append(files, pkiFile{s.Config.CertPath(config.CertCASigner), pki.First(ca), pki.ModeCert})
	}
	for _, certs := range []bool{false, true} {
		for _, f := range files {
			if (f.mode == pki.ModeCert) != certs {
				continue
			}
			if err := s.Files.WriteFile(f.path, f.data, f.mode); err != nil {
				return err
			}
		}
	}
	return nil
}

// hours prints a whole number of hours as "720h", as the configuration
// spells the renewal window, rather than "720h0m0s".
func hours(d time.Duration) string {
	if d%time.Hour == 0 {
		return fmt.Sprintf("%dh", d/time.Hour)
	}
	return d.String()
}

// day prints a time as the date it falls on, in UTC.
func day(t time.Time) string {
	return t.UTC().Format(time.DateOnly)
}

// RenewsAt is when each certificate and kubeconfig that kubeboot renews
// comes due, by name: certificates.renewBefore before its end. It leaves
// out the CAs, a certificate whose CA's key is not here, the certificate
// the kubelet rotates, and one that expires with its CA, which no renewal
// extends.
func RenewsAt(cfg *config.ClusterConfiguration, list []pki.Expiration) map[string]time.Time {
	ends := map[string]time.Time{}
	for _, e := range list {
		if e.CA == "" {
			ends[e.Name] = e.NotAfter
		}
	}
	at := map[string]time.Time{}
	for _, e := range list {
		if e.CA != "" && !e.External && e.File == "" && !e.Missing && e.Err == nil && e.NotAfter.Before(ends[e.CA]) {
			at[e.Name] = e.NotAfter.Add(-cfg.Certificates.RenewBefore.Duration)
		}
	}
	return at
}

// Due are the certificates and kubeconfigs of the node that have come due
// at now (RenewsAt), by name in the order pki.Expirations lists them, and
// when the next of the others comes due (zero when none is left).
func Due(s *Node, now time.Time) ([]string, time.Time, error) {
	have, err := ReadPKI(s)
	if err != nil {
		return nil, time.Time{}, err
	}
	list := pki.Expirations(s.Config, have, now)
	at := RenewsAt(s.Config, list)
	var due []string
	var next time.Time
	for _, e := range list {
		when, ok := at[e.Name]
		switch {
		case !ok:
		case !when.After(now):
			due = append(due, e.Name)
		case next.IsZero() || when.Before(next):
			next = when
		}
	}
	return due, next, nil
}

// RenewCerts re-issues the named certificates and kubeconfigs (nil: every
// one whose CA key is here) with the existing CAs, and returns the
// components that must restart to load them. A kubelet.conf that names
// the certificate the kubelet rotates is left alone, and it says so.
func RenewCerts(s *Node, names []string, newKeys bool) ([]string, error) {
	have, err := ReadPKI(s)
	if err != nil {
		return nil, err
	}
	renewed, err := pki.Renew(s.Config, have, time.Now(), names, newKeys)
	if err != nil {
		return nil, err
	}
	var done []string
	for name, pair := range renewed.Certs {
		if len(pair.Cert) > 0 {
			done = append(done, name)
		}
	}
	for name, data := range renewed.Kubeconfigs {
		if len(data) > 0 {
			done = append(done, name)
		}
	}
	slices.Sort(done)
	reportKubeletRotated(s, have, names)
	set := merge(have, renewed)
	if err := checkCAExpiry(s, set, nil); err != nil {
		return nil, err
	}
	if err := writePKI(s, done, set); err != nil {
		return nil, err
	}
	return pki.Restarts(s.Config, done), nil
}

// reportKubeletRotated says, for each of the named kubeconfigs (nil: all)
// that names the client certificate the kubelet rotates, that a renewal
// leaves it to the kubelet.
func reportKubeletRotated(s *Node, have pki.Set, names []string) {
	if names != nil && !slices.Contains(names, config.KubeconfigKubelet) {
		return
	}
	e := pki.KubeletExpiration(s.Config, have, time.Now())
	if e.File == "" {
		return
	}
	expires := "missing"
	if !e.Missing && e.Err == nil {
		expires = "expires " + day(e.NotAfter)
	}
	s.Report.Infof("%s names %s, the client certificate the kubelet rotates itself (%s): not renewed", s.Config.KubeconfigPath(e.Name), e.File, expires)
}
