package phases

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/pki"
)

// RotationStash is where a control-plane node keeps, beside its CAs, the
// new CAs' keys once it has opened them (ReissueRotation), until
// DropRotation: a reissue stopped between writing the new cluster CA's
// key and the rest is taken up from it, since the key the rotation's keys
// were wrapped to is gone by then.
func RotationStash(c *config.ClusterConfiguration) string {
	return filepath.Join(c.Certificates.Dir, config.RotationStash)
}

// TrustRotation makes the node trust rot's CAs and service-account key
// beside its own: each CA file and sa.pub a bundle of the one in use
// first and the new one after it, and each kubeconfig's CA data the same.
// Nothing that signs changes. It says whether it wrote anything.
func TrustRotation(s *Node, rot pki.Rotation) (bool, error) {
	have, err := ReadPKI(s)
	if err != nil {
		return false, err
	}
	set, names, err := retrust(s, have, trustRule{
		ca: func(name string, cur []byte) ([]byte, error) {
			if len(cur) == 0 {
				return nil, fmt.Errorf("%s is missing: this node has no %s to rotate", s.Config.CertPath(name), name)
			}
			return pki.Bundle(cur, rot.CAs[name].Cert), nil
		},
		saPublic:     func(cur []byte) []byte { return pki.Bundle(cur, rot.ServiceAccount.Public) },
		kubeconfigCA: func(cur []byte) []byte { return pki.Bundle(cur, rot.CAs[config.CertCA].Cert) },
	})
	if err != nil {
		return false, err
	}
	if len(names) == 0 {
		s.Report.Infof("the node trusts the new CAs already")
		return false, nil
	}
	s.Report.Infof("trusting the new CAs beside the old: %v", names)
	return true, writePKI(s, names, merge(have, set))
}

// trustRule is how a rotation step changes what the node trusts, each
// from what the node has.
type trustRule struct {
	// ca is the certificates of the CA file name.
	ca func(name string, cur []byte) ([]byte, error)
	// saPublic is sa.pub's keys.
	saPublic func(cur []byte) []byte
	// kubeconfigCA is a kubeconfig's CA data.
	kubeconfigCA func(cur []byte) []byte
}

// retrust is what rule changes of the node's trust, from have: the files
// in a set, and their names, the CAs first, in order.
func retrust(s *Node, have pki.Set, rule trustRule) (pki.Set, []string, error) {
	set := pki.Set{Certs: map[string]pki.KeyPair{}, Kubeconfigs: map[string][]byte{}}
	var names []string
	for _, name := range pki.RotatedCAs(s.Config) {
		cur := have.Certs[name].Cert
		want, err := rule.ca(name, cur)
		if err != nil {
			return pki.Set{}, nil, err
		}
		if !bytes.Equal(want, cur) {
			set.Certs[name] = pki.KeyPair{Cert: want}
			names = append(names, name)
		}
	}
	if want := rule.saPublic(have.ServiceAccount.Public); !bytes.Equal(want, have.ServiceAccount.Public) {
		set.ServiceAccount.Public = want
		names = append(names, config.KeyServiceAccount)
	}
	kubeconfigs, err := kubeconfigsTrusting(s, have, rule.kubeconfigCA)
	if err != nil {
		return pki.Set{}, nil, err
	}
	maps.Copy(set.Kubeconfigs, kubeconfigs)
	return set, append(names, slices.Sorted(maps.Keys(kubeconfigs))...), nil
}

// kubeconfigsTrusting is each of the node's kubeconfigs whose CA data
// trust changes, with the CA data trust returns for it.
func kubeconfigsTrusting(s *Node, have pki.Set, trust func(ca []byte) []byte) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, name := range pki.KubeconfigNames(s.Config) {
		data := have.Kubeconfigs[name]
		if len(data) == 0 {
			continue
		}
		ca, err := pki.KubeconfigCA(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Config.KubeconfigPath(name), err)
		}
		want := trust(ca)
		if bytes.Equal(want, ca) {
			continue
		}
		if out[name], err = pki.WithKubeconfigCA(data, want); err != nil {
			return nil, fmt.Errorf("%s: %w", s.Config.KubeconfigPath(name), err)
		}
	}
	return out, nil
}

// ReissueRotation moves the node's signing to the new CAs and the new
// service-account key, and reissues every leaf certificate and kubeconfig
// with them: each CA file becomes the new CA first and the old after it,
// with the new key, so that what the node issues and what its
// controller-manager signs comes from the new CA while the old stays
// trusted. The new keys are opened with the node's cluster CA key (the
// old one, to which they were wrapped) and kept in RotationStash first.
// A kubelet.conf whose certificate the kubelet rotates is the kubelet's
// (RenewKubeletClientCert). It says whether it wrote anything.
func ReissueRotation(s *Node, files map[string][]byte) (bool, error) {
	have, err := ReadPKI(s)
	if err != nil {
		return false, err
	}
	rot, err := stashedRotation(s, files, have)
	if err != nil {
		return false, err
	}
	set := pki.Set{Certs: map[string]pki.KeyPair{}, Kubeconfigs: have.Kubeconfigs, ClientFiles: have.ClientFiles}
	maps.Copy(set.Certs, have.Certs)
	switched := true
	for _, name := range pki.RotatedCAs(s.Config) {
		n := rot.CAs[name]
		if !bytes.Equal(pki.First(have.Certs[name].Cert), pki.First(n.Cert)) {
			switched = false
		}
		set.Certs[name] = pki.KeyPair{Cert: pki.Bundle(n.Cert, have.Certs[name].Cert), Key: n.Key}
	}
	set.ServiceAccount = pki.ServiceAccountKey{Private: rot.ServiceAccount.Private, Public: pki.Bundle(rot.ServiceAccount.Public, have.ServiceAccount.Public)}
	if switched && bytes.Equal(have.ServiceAccount.Private, rot.ServiceAccount.Private) && reissued(s, have) {
		s.Report.Infof("the node signs with the new CAs, and its certificates are theirs already")
		return false, nil
	}
	renewed, err := pki.Renew(s.Config, set, time.Now(), nil, false)
	if err != nil {
		return false, err
	}
	all := merge(set, renewed)
	names := append(pki.RotatedCAs(s.Config), config.KeyServiceAccount)
	for name, pair := range renewed.Certs {
		if len(pair.Cert) > 0 {
			names = append(names, name)
		}
	}
	for name, data := range renewed.Kubeconfigs {
		if len(data) > 0 {
			names = append(names, name)
		}
	}
	// kubelet.conf, when the kubelet rotates its certificate, is not
	// renewed: it trusts the new CA first all the same.
	kubeconfigs, err := kubeconfigsTrusting(s, all, func(ca []byte) []byte { return pki.Bundle(rot.CAs[config.CertCA].Cert, ca) })
	if err != nil {
		return false, err
	}
	maps.Copy(all.Kubeconfigs, kubeconfigs)
	names = append(names, slices.Sorted(maps.Keys(kubeconfigs))...)
	slices.Sort(names)
	s.Report.Infof("signing with the new CAs; reissued %v", slices.Compact(names))
	// Leaves first and the CAs' files last, so that a stop midway leaves
	// the old CA first in each CA file, with its key, until the end.
	leaves := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return slices.Contains(pki.RotatedCAs(s.Config), n) })
	if err := writePKI(s, leaves, all); err != nil {
		return false, err
	}
	return true, writePKI(s, pki.RotatedCAs(s.Config), all)
}

// reissued says whether every leaf certificate and embedded kubeconfig
// certificate of have is signed by the first certificate of its CA file.
func reissued(s *Node, have pki.Set) bool {
	for _, spec := range pki.CertSpecs(s.Config) {
		if spec.Usage != pki.UsageCA && !pki.SignedBy(have.Certs[spec.Name].Cert, have.Certs[spec.CA].Cert) {
			return false
		}
	}
	for _, spec := range pki.KubeconfigSpecs(s.Config) {
		if cert := pki.KubeconfigCert(have.Kubeconfigs[spec.Name]); cert != nil && !pki.SignedBy(cert, have.Certs[spec.Client.CA].Cert) {
			return false
		}
	}
	return true
}

// stashedRotation is the rotation with its keys: from RotationStash, or
// opened with the node's cluster CA key and then stashed.
func stashedRotation(s *Node, files map[string][]byte, have pki.Set) (pki.Rotation, error) {
	path := RotationStash(s.Config)
	data, err := s.Files.ReadFile(path)
	switch {
	case err == nil:
		var stashed map[string][]byte
		if err := json.Unmarshal(data, &stashed); err != nil {
			return pki.Rotation{}, fmt.Errorf("%s does not parse (%w): restore it, or remove it if this node's CA files still have the old CA first", path, err)
		}
		// The stash holds the keys in the clear: reopen them as files do.
		rot, err := pki.PublicRotation(s.Config, files)
		if err != nil {
			return pki.Rotation{}, err
		}
		for name, pair := range rot.CAs {
			pair.Key = stashed[name]
			rot.CAs[name] = pair
		}
		rot.ServiceAccount.Private = stashed[config.KeyServiceAccount]
		return rot, pki.CheckRotation(rot)
	case !errors.Is(err, fs.ErrNotExist):
		return pki.Rotation{}, fmt.Errorf("read %s: %w", path, err)
	}
	rot, err := pki.OpenRotation(s.Config, files, have.Certs[config.CertCA].Key)
	if err != nil {
		return pki.Rotation{}, err
	}
	stash := map[string][]byte{config.KeyServiceAccount: rot.ServiceAccount.Private}
	for name, pair := range rot.CAs {
		stash[name] = pair.Key
	}
	data, err = json.Marshal(stash)
	if err != nil {
		return pki.Rotation{}, err
	}
	return rot, s.Files.WriteFile(path, data, pki.ModeKey)
}

// DropRotation makes the node trust only the CAs and service-account key
// it signs with: each CA file, sa.pub and each kubeconfig's CA data keep
// their first certificate or key alone, and RotationStash goes. It
// refuses a node that does not sign with rot's CAs yet (ReissueRotation
// first). It says whether it wrote anything.
func DropRotation(s *Node, rot pki.Rotation) (bool, error) {
	have, err := ReadPKI(s)
	if err != nil {
		return false, err
	}
	ca := pki.First(have.Certs[config.CertCA].Cert)
	set, names, err := retrust(s, have, trustRule{
		ca: func(name string, cur []byte) ([]byte, error) {
			first := pki.First(cur)
			if !bytes.Equal(first, pki.First(rot.CAs[name].Cert)) {
				return nil, fmt.Errorf("%s does not have the new %s first: this node does not sign with it yet; the rotation's reissue step comes before this one", s.Config.CertPath(name), name)
			}
			return first, nil
		},
		saPublic:     pki.First,
		kubeconfigCA: func([]byte) []byte { return ca },
	})
	if err != nil {
		return false, err
	}
	if len(names) > 0 {
		s.Report.Infof("trusting the new CAs alone: %v", names)
		if err := writePKI(s, names, merge(have, set)); err != nil {
			return false, err
		}
	}
	if _, err := s.Files.ReadFile(RotationStash(s.Config)); err == nil {
		if err := s.Files.Remove(RotationStash(s.Config)); err != nil {
			return false, err
		}
	}
	return len(names) > 0, nil
}
