package config

import (
	"net"
	"net/url"
	"path/filepath"
	"strconv"
)

// The PKI file base names, relative to Certificates.Dir, in kubeadm's layout.
// A certificate is <name>.crt and its key <name>.key.
const (
	CertCA                     = "ca"
	CertAPIServer              = "apiserver"
	CertAPIServerKubeletClient = "apiserver-kubelet-client"
	CertAPIServerEtcdClient    = "apiserver-etcd-client"
	CertFrontProxyCA           = "front-proxy-ca"
	CertFrontProxyClient       = "front-proxy-client"
	CertEtcdCA                 = "etcd/ca"
	CertEtcdServer             = "etcd/server"
	CertEtcdPeer               = "etcd/peer"
	CertEtcdHealthcheckClient  = "etcd/healthcheck-client"
	// CertControllerManager and CertScheduler are serving certificates that
	// kubeadm does not issue; they let health checks verify TLS.
	CertControllerManager = "controller-manager"
	CertScheduler         = "scheduler"
	// CertKubeletServer is the kubelet's serving certificate, issued from
	// the cluster CA when security.verifyKubeletServingCerts is on, so that
	// the API server can verify the kubelet it talks to.
	CertKubeletServer = "kubelet-server"
	// KeyServiceAccount is the service-account signing pair: sa.key and sa.pub.
	KeyServiceAccount = "sa"
	// CertCASigner is the cluster CA's certificate alone, ca-signer.crt,
	// which kubeboot keeps beside ca.crt: what the controller-manager
	// signs with (its --cluster-signing-cert-file takes exactly one
	// certificate, while ca.crt holds two during a CA rotation, the one
	// that signs first). It has no key of its own: ca.key is its key.
	CertCASigner = "ca-signer"
	// RotationStash is the file, in Certificates.Dir, where a
	// control-plane node keeps the new CAs' keys during a CA rotation,
	// from its reissue step to its drop step.
	RotationStash = "rotate-ca.json"
)

// The kubeconfig file names in Paths.KubeconfigDir.
const (
	KubeconfigAdmin             = "admin.conf"
	KubeconfigSuperAdmin        = "super-admin.conf"
	KubeconfigKubelet           = "kubelet.conf"
	KubeconfigControllerManager = "controller-manager.conf"
	KubeconfigScheduler         = "scheduler.conf"
	// KubeconfigBootstrapKubelet is a joining worker's TLS bootstrap
	// credential: the kubelet trades its bootstrap token for a client
	// certificate, then writes kubelet.conf.
	KubeconfigBootstrapKubelet = "bootstrap-kubelet.conf"
	// KubeconfigCSRApprover is the CSR approver's: a static pod may not
	// use a service account, so it gets a client certificate of its own.
	KubeconfigCSRApprover = "csr-approver.conf"
)

// EtcdRestoringDir is where `etcd restore` writes the new data dir of the
// local etcd, beside the old one.
func (c *ClusterConfiguration) EtcdRestoringDir() string {
	return c.Etcd.Local.DataDir + ".restoring"
}

// EtcdBeforeRestoreDir is where `etcd restore` keeps the old data dir of
// the local etcd until the restored control plane is healthy.
func (c *ClusterConfiguration) EtcdBeforeRestoreDir() string {
	return c.Etcd.Local.DataDir + ".before-restore"
}

// EtcdLeftDir is where a control-plane node's join keeps the data of its
// etcd member once the cluster no longer has the member (a restore made a
// new cluster, or the member was removed), until it has joined again.
func (c *ClusterConfiguration) EtcdLeftDir() string {
	return c.Etcd.Local.DataDir + ".left"
}

// CertPath returns the node path of the certificate <name>.crt.
func (c *ClusterConfiguration) CertPath(name string) string {
	return filepath.Join(c.Certificates.Dir, name+".crt")
}

// KeyPath returns the node path of the private key <name>.key.
func (c *ClusterConfiguration) KeyPath(name string) string {
	return filepath.Join(c.Certificates.Dir, name+".key")
}

// PublicKeyPath returns the node path of the public key <name>.pub.
func (c *ClusterConfiguration) PublicKeyPath(name string) string {
	return filepath.Join(c.Certificates.Dir, name+".pub")
}

// KubeconfigPath returns the node path of a kubeconfig file.
func (c *ClusterConfiguration) KubeconfigPath(name string) string {
	return filepath.Join(c.Paths.KubeconfigDir, name)
}

// ManifestPath returns the node path of a component's static pod manifest.
func (c *ClusterConfiguration) ManifestPath(component string) string {
	return filepath.Join(c.Paths.ManifestsDir, component+".yaml")
}

// LocalAPIEndpoint is the URL of this node's own API server.
func (c *ClusterConfiguration) LocalAPIEndpoint() string {
	return "https://" + net.JoinHostPort(c.Node.AdvertiseAddress, strconv.Itoa(int(c.APIServer.BindPort)))
}

// ControlPlaneURL is the URL clients outside the control plane use: the
// controlPlaneEndpoint (with the bind port when it names none), else the
// local endpoint.
func (c *ClusterConfiguration) ControlPlaneURL() string {
	if c.ControlPlaneEndpoint == "" {
		return c.LocalAPIEndpoint()
	}
	host, port := c.ControlPlaneHostPort()
	return (&url.URL{Scheme: "https", Host: net.JoinHostPort(host, port)}).String()
}

// ControlPlaneHostPort splits the controlPlaneEndpoint into host and port,
// defaulting the port to the API server's bind port.
func (c *ClusterConfiguration) ControlPlaneHostPort() (host, port string) {
	host, port, err := net.SplitHostPort(c.ControlPlaneEndpoint)
	if err != nil {
		return c.ControlPlaneEndpoint, strconv.Itoa(int(c.APIServer.BindPort))
	}
	return host, port
}
