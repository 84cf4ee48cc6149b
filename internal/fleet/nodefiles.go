package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/csrapprover"
	"github.com/kubeboot/kubeboot/internal/exit"
)

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
		doc["node"] = n.registration("address")
		doc["discovery"] = discovery
	} else {
		doc["kind"] = config.KindClusterConfiguration
		doc["node"] = n.registration("advertiseAddress")
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

// registration is the node section of n's file: its name, its address
// under the key of its kind of file (a worker's address, a control-plane
// node's advertiseAddress) and, on a dual-stack node, its secondary one.
func (n Node) registration(addressKey string) map[string]any {
	r := map[string]any{"name": n.Name, addressKey: n.Address}
	if n.SecondaryAddress != "" {
		r["secondaryAddress"] = n.SecondaryAddress
	}
	return r
}

// bootstrapTokens are the tokens the first control-plane node's init
// creates: the cluster-wide one, which the control-plane nodes and a stock
// `kubeadm join` join with, then each worker's, bound to it alone
// (csrapprover.BoundGroup): a CSR asked with it for any other name is
// denied, and it joins its node once. A worker added to the fleet after
// that file was written is left out (secrets.inFirstFile), so that the
// file stays as it was.
func (d *Description) bootstrapTokens(s secrets) []any {
	tokens := []any{map[string]any{"token": s.token}}
	for _, n := range d.Nodes {
		if n.Role != RoleWorker || s.inFirstFile != nil && !s.inFirstFile[n.Name] {
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

// workerTokens are the workers' node-bound tokens as the first
// control-plane node's file, listing them all, loads them.
func (d *Description) workerTokens(s secrets) ([]WorkerToken, error) {
	all := s
	all.inFirstFile = nil
	doc, err := d.document(d.first(), all)
	if err != nil {
		return nil, err
	}
	loaded, err := d.load(d.first(), doc)
	if err != nil {
		return nil, err
	}
	var workers []WorkerToken
	for _, n := range d.Nodes {
		if n.Role != RoleWorker {
			continue
		}
		i := slices.IndexFunc(loaded.Cluster.BootstrapTokens, func(t config.BootstrapTokenSpec) bool { return t.Token == s.nodeTokens[n.Name] })
		if i < 0 {
			return nil, fmt.Errorf("node %s's token is not among the first control-plane node's", n.Name)
		}
		workers = append(workers, WorkerToken{Node: n.Name, Token: loaded.Cluster.BootstrapTokens[i], InFirstFile: s.inFirstFile == nil || s.inFirstFile[n.Name]})
	}
	return workers, nil
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
