package fleet

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kubeboot/kubeboot/internal/atomicfile"
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/pki"
)

// The files of a fleet's output directory, besides NodesDir/<node>.yaml.
const (
	// TokenFile holds the bootstrap token every node joins with.
	TokenFile = "bootstrap-token"
	// CertificateKeyFile holds the key of the kubeadm-certs Secret, from
	// which the joining control-plane nodes fetch the cluster secrets.
	CertificateKeyFile = "certificate-key"
	// NodeTokensFile holds each worker's node-bound token, a line
	// "<name> <token>" each.
	NodeTokensFile = "node-tokens"
	// CACertFile and CAKeyFile are the cluster CA, made once.
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
	// CACertHashFile holds the CA's pin, sha256:<hex>, as the joining
	// nodes' caCertHashes name it.
	CACertHashFile = "ca-cert-hash"
	// ConfigCACertFile and ConfigCAKeyFile are the fleet's config CA, made
	// once and apart from the cluster's: it signs the nodes' files and
	// issues the serving certificate of `config serve`, so that a rotation
	// of the cluster CA leaves the machines' pin as it was.
	ConfigCACertFile = "config-ca.crt"
	ConfigCAKeyFile  = "config-ca.key"
	// ConfigCAHashFile holds the config CA's pin, sha256:<hex>, which a
	// machine that fetches its file is given as kubeboot.config-ca-hash=.
	ConfigCAHashFile = "config-ca-hash"
	// NodesDir holds every node's file, <name>.yaml, mode 0600: each
	// holds the token, and the first control-plane node's the CA's key.
	// Beside each is its signature by the config CA, <name>.yaml.sig,
	// which `config serve` sends with it.
	NodesDir = "nodes"
	// MACsFile lists the nodes that have a MAC address, a line
	// "<mac> <name>" each, by which `config serve` finds a machine's file.
	MACsFile = "macs"
)

// Modes of what a plan writes: everything but the CAs' certificates and
// their pins is a secret.
const (
	dirMode    fs.FileMode = 0o700
	secretMode fs.FileMode = 0o600
	publicMode fs.FileMode = 0o644
)

// Result is what Plan.Write did.
type Result struct {
	// Dir is the output directory.
	Dir string `json:"dir"`
	// CACertHash is the CA's pin.
	CACertHash string `json:"caCertHash"`
	// ConfigCAHash is the config CA's pin, the machines'
	// kubeboot.config-ca-hash=.
	ConfigCAHash string `json:"configCAHash"`
	// Nodes are the nodes' files, by node name, relative to Dir.
	Nodes map[string]string `json:"nodes"`
	// Written are the files written, relative to Dir; Unchanged
	// the ones that already held what it would write.
	Written   []string `json:"written"`
	Unchanged []string `json:"unchanged"`
	// ToAdmit are the workers whose tokens the first control-plane node's
	// file does not list, added after it was written: each joins once its
	// token is made in the running cluster (`config fleet --kubeconfig`).
	ToAdmit []string `json:"toAdmit"`
}

// WorkerToken is a worker's node-bound bootstrap token.
type WorkerToken struct {
	// Node is the worker's name.
	Node string
	// Token is the token as the first control-plane node's init creates
	// it: its ttl, usages and groups defaulted as that node's file loads.
	Token config.BootstrapTokenSpec
	// InFirstFile says whether the first control-plane node's file lists
	// the token, so that its init creates it.
	InFirstFile bool
}

// outFile is one file a plan writes.
type outFile struct {
	name string
	data []byte
	mode fs.FileMode
}

// Plan is a fleet's files, made and checked, not yet written.
type Plan struct {
	dir string
	// Token is the bootstrap token every node joins with.
	Token string
	// CACertHash is the CA's pin, as the joining nodes' caCertHashes
	// name it.
	CACertHash string
	// ConfigCAHash is the config CA's pin, as the machines that fetch
	// their files are given it.
	ConfigCAHash string
	// Nodes are the nodes' files, by node name.
	Nodes map[string][]byte
	// Workers are the workers' node-bound tokens, in the description's
	// order.
	Workers []WorkerToken
	// files are every file of dir, in the order they are written.
	files []outFile
}

// NewPlan makes the fleet's files for dir: its secrets (made on the first
// run, read back from dir on the next ones) and every node's file, each
// checked as the node will load it. It writes nothing.
func NewPlan(d *Description, dir string) (*Plan, error) {
	// A description made in code, as the lab's, is checked as one read.
	if err := d.validate(); err != nil {
		return nil, err
	}
	s, files, err := readSecrets(dir, d)
	if err != nil {
		return nil, err
	}
	if s.ca.Cert == nil {
		// Every node's file is checked before the CA is made of the first
		// one's settings; any well-formed pin stands for its hash.
		s.hash = "sha256:" + strings.Repeat("0", 64)
		if _, err := d.nodeFiles(s); err != nil {
			return nil, err
		}
		if s.ca, err = newCA(d, s); err != nil {
			return nil, err
		}
	}
	if s.hash, err = pki.CACertHash(s.ca.Cert); err != nil {
		return nil, err
	}
	if s.configCA.Cert == nil {
		if s.configCA, err = pki.NewCA(configCASpec); err != nil {
			return nil, err
		}
	}
	configHash, err := pki.CACertHash(s.configCA.Cert)
	if err != nil {
		return nil, err
	}
	if s.inFirstFile, err = listedInFirstFile(dir, d, s); err != nil {
		return nil, err
	}
	nodes, err := d.nodeFiles(s)
	if err != nil {
		return nil, err
	}
	workers, err := d.workerTokens(s)
	if err != nil {
		return nil, err
	}
	files = append(files,
		outFile{CACertFile, s.ca.Cert, publicMode},
		outFile{CAKeyFile, s.ca.Key, secretMode},
		outFile{CACertHashFile, []byte(s.hash + "\n"), publicMode},
		outFile{ConfigCACertFile, s.configCA.Cert, publicMode},
		outFile{ConfigCAKeyFile, s.configCA.Key, secretMode},
		outFile{ConfigCAHashFile, []byte(configHash + "\n"), publicMode})
	p := &Plan{dir: dir, Token: s.token, CACertHash: s.hash, ConfigCAHash: configHash, Nodes: map[string][]byte{}, Workers: workers, files: files}
	var macs []string
	for i, n := range d.Nodes {
		previous, err := os.ReadFile(filepath.Join(dir, nodes[i].name+sigExt))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		sig, err := signature(s.configCA, nodes[i].data, previous)
		if err != nil {
			return nil, err
		}
		p.files = append(p.files, nodes[i], outFile{nodes[i].name + sigExt, []byte(sig), publicMode})
		p.Nodes[n.Name] = nodes[i].data
		if n.MAC != "" {
			macs = append(macs, n.MAC+" "+n.Name+"\n")
		}
	}
	slices.Sort(macs)
	p.files = append(p.files, outFile{MACsFile, []byte(strings.Join(macs, "")), publicMode})
	return p, nil
}

// Write writes the plan's files into its directory, made if missing,
// rewriting no file that holds what it would write.
func (p *Plan) Write() (*Result, error) {
	result := &Result{Dir: p.dir, CACertHash: p.CACertHash, ConfigCAHash: p.ConfigCAHash, Nodes: map[string]string{}, Written: []string{}, Unchanged: []string{}}
	for name := range p.Nodes {
		result.Nodes[name] = nodePath(name)
	}
	result.ToAdmit = []string{}
	for _, w := range p.Workers {
		if !w.InFirstFile {
			result.ToAdmit = append(result.ToAdmit, w.Node)
		}
	}
	for _, sub := range []string{p.dir, filepath.Join(p.dir, NodesDir)} {
		if err := os.MkdirAll(sub, dirMode); err != nil {
			return nil, err
		}
	}
	for _, f := range p.files {
		path := filepath.Join(p.dir, f.name)
		if same(path, f) {
			result.Unchanged = append(result.Unchanged, f.name)
			continue
		}
		if err := atomicfile.WriteFile(path, f.data, f.mode); err != nil {
			return nil, err
		}
		result.Written = append(result.Written, f.name)
	}
	return result, nil
}

// nodePath is a node's file, relative to the fleet's directory.
func nodePath(name string) string { return filepath.Join(NodesDir, name+".yaml") }

// same says whether path holds f already, with its mode.
func same(path string, f outFile) bool {
	info, err := os.Stat(path)
	if err != nil || info.Mode() != f.mode {
		return false
	}
	data, err := os.ReadFile(path)
	return err == nil && bytes.Equal(data, f.data)
}
