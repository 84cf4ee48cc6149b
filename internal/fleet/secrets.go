package fleet

import (
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/kubeadmcerts"
	"github.com/kubeboot/kubeboot/pki"
)

// secrets are what the fleet's nodes share.
type secrets struct {
	token string
	// nodeTokens are the workers' node-bound tokens, by node name.
	nodeTokens map[string]string
	// inFirstFile are the workers whose tokens the first control-plane
	// node's file lists (see listedInFirstFile); nil when all are.
	inFirstFile    map[string]bool
	certificateKey string
	ca             pki.KeyPair
	hash           string
	// configCA signs the nodes' files and issues config serve's
	// certificate.
	configCA pki.KeyPair
}

// readSecrets reads the secrets a run before this one left in dir; the
// token and certificate key it lacks are made, and returned as files to
// write. A CA it lacks (the cluster's, the config CA) is left for the
// caller to make.
func readSecrets(dir string, d *Description) (secrets, []outFile, error) {
	var s secrets
	var fresh []outFile
	token, err := readOptional(dir, TokenFile)
	if err != nil {
		return s, nil, err
	}
	if token == nil {
		t, err := bootstraptoken.Generate(rand.Reader)
		if err != nil {
			return s, nil, err
		}
		token = []byte(t.Value())
		fresh = append(fresh, outFile{TokenFile, []byte(t.Value() + "\n"), secretMode})
	} else {
		fresh = append(fresh, outFile{TokenFile, token, secretMode})
	}
	s.token = strings.TrimSpace(string(token))
	if _, err := bootstraptoken.Parse(s.token); err != nil {
		return s, nil, &exit.UsageError{Msg: fmt.Sprintf("%s: not a bootstrap token: remove the file for a new one, and make every node's file anew", filepath.Join(dir, TokenFile))}
	}
	nodeTokens, err := readOptional(dir, NodeTokensFile)
	if err != nil {
		return s, nil, err
	}
	if s.nodeTokens, err = workerTokens(d, string(nodeTokens)); err != nil {
		return s, nil, &exit.UsageError{Msg: fmt.Sprintf("%s: %v: remove the file for new tokens, and make every node's file anew", filepath.Join(dir, NodeTokensFile), err)}
	}
	var lines []string
	for name, token := range s.nodeTokens {
		lines = append(lines, name+" "+token+"\n")
	}
	slices.Sort(lines)
	fresh = append(fresh, outFile{NodeTokensFile, []byte(strings.Join(lines, "")), secretMode})
	key, err := readOptional(dir, CertificateKeyFile)
	if err != nil {
		return s, nil, err
	}
	if key == nil {
		k, err := kubeadmcerts.Generate(rand.Reader)
		if err != nil {
			return s, nil, err
		}
		key = []byte(k + "\n")
	}
	fresh = append(fresh, outFile{CertificateKeyFile, key, secretMode})
	s.certificateKey = strings.TrimSpace(string(key))
	if _, err := kubeadmcerts.ParseKey(s.certificateKey); err != nil {
		return s, nil, &exit.UsageError{Msg: fmt.Sprintf("%s: not a certificate key (64 hex digits): remove the file for a new one, and make every node's file anew", filepath.Join(dir, CertificateKeyFile))}
	}
	if s.ca, err = readCA(dir, CACertFile, CAKeyFile, "(and the cluster's nodes) for a new CA"); err != nil {
		return s, nil, err
	}
	if s.configCA, err = readCA(dir, ConfigCACertFile, ConfigCAKeyFile, "for a new config CA, and give the machines its pin (config-ca-hash)"); err != nil {
		return s, nil, err
	}
	return s, fresh, nil
}

// readCA reads a CA's certificate and key from dir, both or neither (an
// empty KeyPair); fresh is what removing both makes anew.
func readCA(dir, certFile, keyFile, fresh string) (pki.KeyPair, error) {
	cert, err := readOptional(dir, certFile)
	if err != nil {
		return pki.KeyPair{}, err
	}
	key, err := readOptional(dir, keyFile)
	if err != nil {
		return pki.KeyPair{}, err
	}
	switch {
	case cert == nil && key == nil:
		return pki.KeyPair{}, nil
	case cert == nil || key == nil:
		return pki.KeyPair{}, &exit.UsageError{Msg: fmt.Sprintf("%s holds one of %s and %s: restore the other, or remove both %s", dir, certFile, keyFile, fresh)}
	}
	if _, err := tls.X509KeyPair(cert, key); err != nil {
		return pki.KeyPair{}, &exit.UsageError{Msg: fmt.Sprintf("%s and %s in %s are no certificate and its key: %v", certFile, keyFile, dir, err)}
	}
	return pki.KeyPair{Cert: cert, Key: key}, nil
}

// readOptional reads the file name of dir; one that does not exist reads
// as nil.
func readOptional(dir, name string) ([]byte, error) {
	data, err := os.ReadFile(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return data, err
}

// configCASpec is the fleet's config CA: ECDSA P-256, valid ten years,
// as long as the machines keep its pin.
var configCASpec = pki.CertSpec{Name: "config-ca", CN: "kubeboot-fleet-config", Usage: pki.UsageCA,
	Algorithm: config.ECDSAP256, Validity: 10 * 365 * 24 * time.Hour}

// workerTokens are the node-bound tokens of d's workers: the ones listed
// ("<name> <token>" lines, as NodeTokensFile holds them) kept, a new one
// for a worker not listed; a node no longer in d loses its token.
func workerTokens(d *Description, listed string) (map[string]string, error) {
	old := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(listed), "\n") {
		if line == "" {
			continue
		}
		name, token, ok := strings.Cut(line, " ")
		if _, err := bootstraptoken.Parse(token); !ok || err != nil {
			return nil, fmt.Errorf("a line is no \"<node> <token>\"")
		}
		old[name] = token
	}
	tokens := map[string]string{}
	for _, n := range d.Nodes {
		if n.Role != RoleWorker {
			continue
		}
		if token, ok := old[n.Name]; ok {
			tokens[n.Name] = token
			continue
		}
		t, err := bootstraptoken.Generate(rand.Reader)
		if err != nil {
			return nil, err
		}
		tokens[n.Name] = t.Value()
	}
	return tokens, nil
}

// listedInFirstFile are the workers whose tokens the first control-plane
// node's file, as a run before this one wrote it into dir, lists; nil when
// there is none yet, whose file then lists every worker's. That file stays
// as it was when a worker is added: its node has run init with it already,
// and a worker added later gets its token in the running cluster instead
// (`kubeboot config fleet --kubeconfig`).
func listedInFirstFile(dir string, d *Description, s secrets) (map[string]bool, error) {
	data, err := os.ReadFile(filepath.Join(dir, nodePath(d.Nodes[d.first()].Name)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var first struct {
		BootstrapTokens []struct {
			Token string `json:"token"`
		} `json:"bootstrapTokens"`
	}
	if err := yaml.Unmarshal(data, &first); err != nil {
		// A file that is no longer one is made anew, listing every worker.
		return nil, nil
	}
	listed := map[string]bool{}
	for _, t := range first.BootstrapTokens {
		for name, token := range s.nodeTokens {
			if t.Token == token {
				listed[name] = true
			}
		}
	}
	return listed, nil
}

// newCA makes the cluster CA as the first control-plane node's
// configuration says (its key algorithm and validity).
func newCA(d *Description, s secrets) (pki.KeyPair, error) {
	doc, err := d.document(d.first(), s)
	if err != nil {
		return pki.KeyPair{}, err
	}
	cfg, err := d.load(d.first(), doc)
	if err != nil {
		return pki.KeyPair{}, err
	}
	for _, spec := range pki.CertSpecs(cfg.ControlPlane()) {
		if spec.Name == config.CertCA {
			return pki.NewCA(spec)
		}
	}
	return pki.KeyPair{}, fmt.Errorf("no CA among the certificates")
}
