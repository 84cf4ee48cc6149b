package pki

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
)

// Set is a node's PKI material in memory. Read from disk, an empty field is
// an absent file; returned by Ensure or Renew, it is a file to leave alone.
type Set struct {
	// Certs holds certificates and keys by CertSpec.Name, e.g. "etcd/ca".
	Certs map[string]KeyPair
	// ServiceAccount holds sa.key and sa.pub.
	ServiceAccount ServiceAccountKey
	// Kubeconfigs holds kubeconfig files by file name, e.g. "admin.conf".
	Kubeconfigs map[string][]byte
	// ClientFiles holds, by node path, the files that kubeconfigs whose
	// certificate the kubelet rotates name instead of embedding it
	// (ClientFiles of kubelet.conf): read from disk, never written.
	ClientFiles map[string][]byte
}

// CertNames names what the certs phase owns, for Ensure: every
// certificate of CertSpecs and the service-account key pair.
func CertNames(cfg *config.ClusterConfiguration) []string {
	var names []string
	for _, s := range CertSpecs(cfg) {
		names = append(names, s.Name)
	}
	return append(names, config.KeyServiceAccount)
}

// KubeconfigNames names the kubeconfig files of KubeconfigSpecs, for Ensure.
func KubeconfigNames(cfg *config.ClusterConfiguration) []string {
	var names []string
	for _, k := range KubeconfigSpecs(cfg) {
		names = append(names, k.Name)
	}
	return names
}

// Ensure converges the named parts of have, which holds what exists on
// the node; nil names means everything of CertNames and KubeconfigNames.
// It reuses what passes Check or CheckKubeconfig, creates what is missing,
// and returns only the new material. A CA without its key (external CA) is
// used to check, never to issue; a user-provided CA with its key is used as
// it is. If anything existing is wrong, Ensure returns every problem,
// joined, and creates nothing. Existing files are checked, and keys
// generated, concurrently.
func Ensure(cfg *config.ClusterConfiguration, have Set, now time.Time, names []string) (Set, error) {
	if names == nil {
		names = append(CertNames(cfg), KubeconfigNames(cfg)...)
	}
	if err := known(cfg, names); err != nil {
		return Set{}, err
	}
	b := newBatch(cfg, have, now)
	// In the order of the errors: each an outcome, or the check of an
	// existing file still to run.
	var checks []func() error
	specs := CertSpecs(cfg)
	for _, s := range specs {
		if s.Usage == UsageCA && slices.Contains(names, s.Name) {
			checks = append(checks, outcome(b.ensureCA(s)))
		}
	}
	for _, s := range specs {
		if s.Usage != UsageCA && slices.Contains(names, s.Name) {
			checks = append(checks, b.ensureLeaf(s))
		}
	}
	if slices.Contains(names, config.KeyServiceAccount) {
		checks = append(checks, outcome(b.ensureServiceAccount()))
	}
	for _, k := range KubeconfigSpecs(cfg) {
		if slices.Contains(names, k.Name) {
			checks = append(checks, b.ensureKubeconfig(k))
		}
	}
	if err := errors.Join(runChecks(checks)...); err != nil {
		return Set{}, err
	}
	return b.run()
}

// outcome is a check already done.
func outcome(err error) func() error { return func() error { return err } }

// runChecks runs checks concurrently and returns their errors in their
// order: parsing each certificate and key and verifying each signature is
// most of a converged node's PKI work.
func runChecks(checks []func() error) []error {
	errs := make([]error, len(checks))
	var wg sync.WaitGroup
	for i, check := range checks {
		wg.Go(func() { errs[i] = check() })
	}
	wg.Wait()
	return errs
}

func (b *batch) ensureCA(spec CertSpec) error {
	pair := b.have.Certs[spec.Name]
	switch {
	case len(pair.Cert) > 0:
		_, err := b.ca(spec.Name)
		return err
	case len(pair.Key) > 0:
		// An interrupted first run writes keys before certificates: certify
		// the kept key rather than ask for a human.
		b.create(spec, pair.Key)
		return nil
	}
	b.create(spec, nil)
	return nil
}

// ensureLeaf plans spec's certificate: issued when missing, else checked.
// It returns the check, which runChecks runs with the others.
func (b *batch) ensureLeaf(spec CertSpec) func() error {
	ca, err := b.ca(spec.CA)
	if ca == nil {
		return outcome(err)
	}
	pair := b.have.Certs[spec.Name]
	switch {
	case len(pair.Cert) == 0:
		// A key without its certificate is kept and certified.
		return outcome(b.add(ca, job{spec: spec, key: pair.Key}))
	case ca.created:
		return outcome(&CheckError{File: spec.File(), Problems: []string{"exists but its CA " + spec.CA + ".crt does not"}})
	}
	caCert, now, renewBefore := ca.auth.pair.Cert, b.now, b.renewBefore
	return func() error { return Check(spec, pair, caCert, now, renewBefore) }
}

// ensureKubeconfig plans spec's kubeconfig as ensureLeaf plans a
// certificate.
func (b *batch) ensureKubeconfig(spec KubeconfigSpec) func() error {
	ca, err := b.ca(spec.Client.CA)
	if ca == nil {
		return outcome(err)
	}
	data := b.have.Kubeconfigs[spec.Name]
	switch {
	case len(data) == 0:
		// Share the component's serving key, from the node or this batch.
		j := job{spec: spec.Client, kubeconfig: &spec, key: b.have.Certs[spec.SharedKey].Key}
		if j.key == nil {
			j.keyOf = b.pending(spec.SharedKey)
		}
		return outcome(b.add(ca, j))
	case ca.created:
		return outcome(&CheckError{File: spec.Name, Problems: []string{"exists but its CA " + spec.Client.CA + ".crt does not"}})
	}
	caCert, files, now, renewBefore := ca.auth.pair.Cert, b.have.ClientFiles, b.now, b.renewBefore
	return func() error { return CheckKubeconfig(spec, data, caCert, files, now, renewBefore) }
}

func (b *batch) ensureServiceAccount() error {
	sa := b.have.ServiceAccount
	switch {
	case len(sa.Private) == 0 && len(sa.Public) == 0:
		b.newServiceAccount = true
	case len(sa.Private) == 0:
		return &CheckError{File: saKeyFile, Problems: []string{"is missing while " + saPubFile + " exists"}}
	case len(sa.Public) == 0:
		pub, err := ServiceAccountPublicKey(sa.Private)
		b.out.ServiceAccount.Public = pub
		return err
	default:
		return CheckServiceAccountKey(sa)
	}
	return nil
}

// known returns an error for a name that is neither a certificate, the
// service-account key nor a kubeconfig of cfg.
func known(cfg *config.ClusterConfiguration, names []string) error {
	all := append(CertNames(cfg), KubeconfigNames(cfg)...)
	for _, n := range names {
		if !slices.Contains(all, n) {
			return fmt.Errorf("find %q: not a certificate or kubeconfig of this node; known: %v", n, all)
		}
	}
	return nil
}
