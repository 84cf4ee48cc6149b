package config

import (
	"fmt"

	sigsyaml "sigs.k8s.io/yaml"
)

// SharedSource names where the cluster keeps its shared configuration
// (see Shared), in errors about it.
const SharedSource = "ConfigMap kube-system/kubeboot-config"

// Shared is c as the cluster keeps it in kube-system/kubeboot-config, for
// the commands that act on the cluster from an administrator's machine
// (`upgrade plan --kubeconfig`): what the control-plane nodes share,
// without this node's registration and without a secret (the certificate
// key, the bootstrap tokens, the cluster CA a fleet file carries).
func (c *ClusterConfiguration) Shared() ([]byte, error) {
	shared := *c
	shared.APIVersion, shared.Kind = APIVersion, KindClusterConfiguration
	shared.Node = NodeRegistration{}
	shared.CertificateKey = ""
	shared.BootstrapTokens = nil
	shared.Certificates.CA = nil
	data, err := sigsyaml.Marshal(&shared)
	if err != nil {
		return nil, fmt.Errorf("render the shared ClusterConfiguration: %w", err)
	}
	return data, nil
}

// ParseShared reads what Shared wrote, defaulted for this machine (host),
// which stands in for the node it was taken from.
func ParseShared(data []byte, host Host) (*ClusterConfiguration, error) {
	doc, err := Parse(SharedSource, data, Env{Host: host, Kinds: []string{KindClusterConfiguration}})
	if err != nil {
		return nil, err
	}
	return doc.Cluster, nil
}
