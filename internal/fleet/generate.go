package fleet

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/atomicfile"
	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/csrapprover"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/kubeadmcerts"
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
	// NodesDir holds every node's file, <name>.yaml, mode 0600: each
	// holds the token, and the first control-plane node's the CA's key.
	// Beside each is its signature by the CA, <name>.yaml.sig, which
	// `config serve` sends with it.
	NodesDir = "nodes"
	// MACsFile lists the nodes that have a MAC address, a line
	// "<mac> <name>" each, by which `config serve` finds a machine's file.
	MACsFile = "macs"
)

// Modes of what Generate writes: everything but the CA's certificate and
// its pin is a secret.
const (
	dirMode    fs.FileMode = 0o700
	secretMode fs.FileMode = 0o600
	publicMode fs.FileMode = 0o644
)

// Result is what Generate did.
type Result struct {
	// Dir is the output directory.
	Dir string `json:"dir"`
	// CACertHash is the CA's pin.
	CACertHash string `json:"caCertHash"`
	// Nodes are the nodes' files, by node name, relative to Dir.
	Nodes map[string]string `json:"nodes"`
	// Written are the files Generate wrote, relative to Dir; Unchanged
	// the ones that already held what it would write.
	Written   []string `json:"written"`
	Unchanged []string `json:"unchanged"`
}

// secrets are what the fleet's nodes share.
type secrets struct {
	token string
	// nodeTokens are the workers' node-bound tokens, by node name.
	nodeTokens     map[string]string
	certificateKey string
	ca             pki.KeyPair
	hash           string
}

// outFile is one file Generate writes.
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
	// Nodes are the nodes' files, by node name.
	Nodes map[string][]byte
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
	nodes, err := d.nodeFiles(s)
	if err != nil {
		return nil, err
	}
	files = append(files,
		outFile{CACertFile, s.ca.Cert, publicMode},
		outFile{CAKeyFile, s.ca.Key, secretMode},
		outFile{CACertHashFile, []byte(s.hash + "\n"), publicMode})
	p := &Plan{dir: dir, Token: s.token, CACertHash: s.hash, Nodes: map[string][]byte{}, files: files}
	var macs []string
	for i, n := range d.Nodes {
		previous, err := os.ReadFile(filepath.Join(dir, nodes[i].name+sigExt))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		sig, err := signature(s.ca, nodes[i].data, previous)
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
	result := &Result{Dir: p.dir, CACertHash: p.CACertHash, Nodes: map[string]string{}, Written: []string{}, Unchanged: []string{}}
	for name := range p.Nodes {
		result.Nodes[name] = nodePath(name)
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

// Generate plans the fleet's files for dir and writes them: nothing is
// written unless every node's file is valid.
func Generate(d *Description, dir string) (*Result, error) {
	p, err := NewPlan(d, dir)
	if err != nil {
		return nil, err
	}
	return p.Write()
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

// readSecrets reads the secrets a run before this one left in dir; the
// token and certificate key it lacks are made, and returned as files to
// write. A CA it lacks is left for the caller to make.
func readSecrets(dir string, d *Description) (secrets, []outFile, error) {
	var s secrets
	var fresh []outFile
	read := func(name string) ([]byte, error) {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return data, err
	}
	token, err := read(TokenFile)
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
	nodeTokens, err := read(NodeTokensFile)
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
	key, err := read(CertificateKeyFile)
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
	cert, err := read(CACertFile)
	if err != nil {
		return s, nil, err
	}
	caKey, err := read(CAKeyFile)
	if err != nil {
		return s, nil, err
	}
	switch {
	case cert == nil && caKey == nil:
	case cert == nil || caKey == nil:
		return s, nil, &exit.UsageError{Msg: fmt.Sprintf("%s holds one of %s and %s: restore the other, or remove both (and the cluster's nodes) for a new CA", dir, CACertFile, CAKeyFile)}
	default:
		if _, err := tls.X509KeyPair(cert, caKey); err != nil {
			return s, nil, &exit.UsageError{Msg: fmt.Sprintf("%s and %s in %s are no certificate and its key: %v", CACertFile, CAKeyFile, dir, err)}
		}
		s.ca = pki.KeyPair{Cert: cert, Key: caKey}
	}
	return s, fresh, nil
}

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

// nodeFiles renders every node's file with s, or says why each that
// would be refused is.
func (d *Description) nodeFiles(s secrets) ([]outFile, error) {
	var files []outFile
	invalid := &InvalidNodesError{}
	for i, n := range d.Nodes {
		data, err := d.nodeFile(i, s)
		var nodeErr *InvalidNodesError
		switch {
		case errors.As(err, &nodeErr):
			invalid.Problems = append(invalid.Problems, nodeErr.Problems...)
		case err != nil:
			return nil, err
		default:
			files = append(files, outFile{nodePath(n.Name), data, secretMode})
		}
	}
	if len(invalid.Problems) > 0 {
		return nil, invalid
	}
	return files, nil
}

// InvalidNodesError says which nodes' files their nodes would refuse,
// and why.
type InvalidNodesError struct {
	Problems []NodeProblem
}

// NodeProblem is one reason a node would refuse its file.
type NodeProblem struct {
	// Source is the fleet's description, Index the node's in its nodes.
	Source string
	Index  int
	Node   string
	// Problem is the field and what is wrong with it.
	Problem string
}

// Error names the description, each node and the field to fix.
func (e *InvalidNodesError) Error() string {
	var lines []string
	for _, p := range e.Problems {
		lines = append(lines, fmt.Sprintf("%s: node %s's file would be refused: %s (set it in cluster, worker or nodes[%d].patch)", p.Source, p.Node, p.Problem, p.Index))
	}
	return strings.Join(lines, "\n")
}

// ExitCode makes the refusal a usage error, exit 2.
func (e *InvalidNodesError) ExitCode() int { return exit.Usage }

// nodeFile renders node i's file and loads it as the node will.
func (d *Description) nodeFile(i int, s secrets) ([]byte, error) {
	doc, err := d.document(i, s)
	if err != nil {
		return nil, err
	}
	if _, err := d.load(i, doc); err != nil {
		return nil, err
	}
	return doc, nil
}

// load loads node i's file as the node will; an InvalidNodesError names
// the node and each field its node would refuse.
func (d *Description) load(i int, doc []byte) (config.Document, error) {
	n := d.Nodes[i]
	loaded, err := config.Parse(nodePath(n.Name), doc, config.Env{Host: config.Host{Name: n.Name, Address: n.Address}})
	var invalid *config.InvalidError
	if errors.As(err, &invalid) {
		e := &InvalidNodesError{}
		for _, p := range invalid.Problems {
			problem := p.Message
			if p.Field != "" {
				problem = p.Field + ": " + p.Message
			}
			e.Problems = append(e.Problems, NodeProblem{Source: d.source, Index: i, Node: n.Name, Problem: problem})
		}
		return loaded, e
	}
	return loaded, err
}

// document renders node i's file: the first control-plane node's
// ClusterConfiguration (with the token, the certificate key and the CA),
// another control-plane node's JoinConfiguration, a worker's
// WorkerConfiguration, each with the node's patch applied.
func (d *Description) document(i int, s secrets) ([]byte, error) {
	n := d.Nodes[i]
	part := d.Cluster
	if n.Role == RoleWorker {
		part = d.Worker
	}
	doc, err := clone(part)
	if err != nil {
		return nil, err
	}
	discovery := map[string]any{"apiServerEndpoint": d.endpoint(), "token": s.token, "caCertHashes": []string{s.hash}}
	if n.Role == RoleWorker {
		// A worker joins with the token bound to it alone.
		discovery["token"] = s.nodeTokens[n.Name]
		doc["kind"] = config.KindWorkerConfiguration
		doc["node"] = map[string]any{"name": n.Name, "address": n.Address}
		doc["discovery"] = discovery
	} else {
		doc["kind"] = config.KindClusterConfiguration
		doc["node"] = map[string]any{"name": n.Name, "advertiseAddress": n.Address}
		doc["controlPlaneEndpoint"] = d.endpoint()
		doc["bootstrapTokens"] = []any{map[string]any{"token": s.token}}
		doc["certificateKey"] = s.certificateKey
		if i == d.first() {
			doc["bootstrapTokens"] = d.bootstrapTokens(s)
			if s.ca.Cert != nil {
				certs, _ := doc["certificates"].(map[string]any)
				if certs == nil {
					certs = map[string]any{}
				}
				certs["ca"] = map[string]any{"cert": string(s.ca.Cert), "key": string(s.ca.Key)}
				doc["certificates"] = certs
			}
		} else {
			doc["kind"] = config.KindJoinConfiguration
			doc["join"] = map[string]any{"certificateKey": s.certificateKey, "discovery": discovery}
		}
	}
	doc["apiVersion"] = APIVersion
	merged, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	if len(n.Patch) > 0 {
		patch, err := json.Marshal(n.Patch)
		if err != nil {
			return nil, &exit.UsageError{Msg: fmt.Sprintf("%s: nodes[%d].patch: %v", d.source, i, err)}
		}
		if merged, err = jsonpatch.MergePatch(merged, patch); err != nil {
			return nil, &exit.UsageError{Msg: fmt.Sprintf("%s: nodes[%d].patch: %v", d.source, i, err)}
		}
	}
	return yaml.JSONToYAML(merged)
}

// bootstrapTokens are the tokens the first control-plane node's init
// creates: the cluster-wide one, which the control-plane nodes and a stock
// `kubeadm join` join with, then each worker's, bound to it alone
// (csrapprover.BoundGroup): a CSR asked with it for any other name is
// denied, and it joins its node once. A worker added to the fleet thus
// changes the first node's file too, whose init creates its token.
func (d *Description) bootstrapTokens(s secrets) []any {
	tokens := []any{map[string]any{"token": s.token}}
	for _, n := range d.Nodes {
		if n.Role != RoleWorker {
			continue
		}
		tokens = append(tokens, map[string]any{
			"token":       s.nodeTokens[n.Name],
			"description": "kubeboot config fleet: joins node " + n.Name + " alone",
			"groups":      []string{csrapprover.BoundGroup, csrapprover.BoundNodeGroup(n.Name)},
		})
	}
	return tokens
}

// clone deep-copies a part of the description, which stays as read.
func clone(m map[string]any) (map[string]any, error) {
	out := map[string]any{}
	data, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, &out); err != nil || out != nil {
		return out, err
	}
	return map[string]any{}, nil
}
