package pki

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
)

// Renew re-issues the named leaf certificates and kubeconfigs with the
// CAs of have, keeping the existing keys unless newKeys is set. Nil names
// means every leaf and kubeconfig whose CA key is present; certificates of
// an external CA are then left out, while naming one is an error. CAs and
// the service-account key are never renewed, nor is a kubelet.conf that
// names the certificate the kubelet rotates (Expiration.File), named or
// not: the kubelet renews that itself. Restarts says which components must
// restart afterwards.
func Renew(cfg *config.ClusterConfiguration, have Set, now time.Time, names []string, newKeys bool) (Set, error) {
	if err := known(cfg, names); err != nil {
		return Set{}, err
	}
	b := newBatch(cfg, have, now)
	renew := func(j job) error {
		if names != nil && !slices.Contains(names, j.spec.Name) {
			return nil
		}
		ca, err := b.ca(j.spec.CA)
		if ca == nil {
			return err
		}
		if names == nil && ca.auth.key == nil {
			return nil
		}
		if newKeys {
			j.key = nil
		}
		return b.add(ca, j)
	}
	var errs []error
	for _, s := range CertSpecs(cfg) {
		switch {
		case s.Usage != UsageCA:
			errs = append(errs, renew(job{spec: s, key: have.Certs[s.Name].Key}))
		case slices.Contains(names, s.Name):
			errs = append(errs, fmt.Errorf("renew %q: kubeboot does not renew CAs", s.Name))
		}
	}
	if slices.Contains(names, config.KeyServiceAccount) {
		errs = append(errs, fmt.Errorf("renew %q: the service-account key is not a certificate", config.KeyServiceAccount))
	}
	for _, k := range KubeconfigSpecs(cfg) {
		if rotatedKubeconfigFile(k, have.Kubeconfigs[k.Name]) != "" {
			continue
		}
		j := job{spec: k.Client, kubeconfig: &k}
		if _, user, err := currentContext(have.Kubeconfigs[k.Name]); err == nil {
			j.key = user.ClientKeyData
		}
		if newKeys {
			// A component renewing both its certificates keeps one key.
			j.keyOf = b.pending(k.SharedKey)
		}
		errs = append(errs, renew(j))
	}
	if err := errors.Join(errs...); err != nil {
		return Set{}, err
	}
	return b.run()
}
