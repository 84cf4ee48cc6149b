package config

import (
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(c *ClusterConfiguration)
		want   []string // one substring per expected error, in order
	}{
		{"defaults are valid", func(*ClusterConfiguration) {}, nil},
		{"dual-stack is valid", func(c *ClusterConfiguration) {
			c.Networking.ServiceSubnet = "10.96.0.0/16,fd00:10:96::/112"
			c.Networking.PodSubnet = "10.244.0.0/16,fd00:10:244::/56"
			c.Node.SecondaryAddress = "fd00:89::10"
		}, nil},
		{"bad CIDR", func(c *ClusterConfiguration) { c.Networking.ServiceSubnet = "10.96.0.0/33" }, []string{"networking.serviceSubnet: Invalid value: \"10.96.0.0/33\": want a CIDR"}},
		{"host bits set", func(c *ClusterConfiguration) { c.Networking.PodSubnet = "10.244.0.1/16" }, []string{"networking.podSubnet: Invalid value: \"10.244.0.1/16\": has host bits set: use 10.244.0.0/16"}},
		{"service range too large", func(c *ClusterConfiguration) { c.Networking.ServiceSubnet = "10.0.0.0/8" }, []string{"too large", "podSubnet: Invalid value: \"10.244.0.0/16\": overlaps serviceSubnet"}},
		{"no room for the first service IP", func(c *ClusterConfiguration) { c.Networking.ServiceSubnet = "10.96.0.0/32" }, []string{"too small"}},
		{"service and pod overlap", func(c *ClusterConfiguration) { c.Networking.PodSubnet = "10.96.0.0/16" }, []string{"overlaps serviceSubnet 10.96.0.0/12"}},
		{"two CIDRs of one family", func(c *ClusterConfiguration) { c.Networking.ServiceSubnet = "10.96.0.0/16,10.97.0.0/16" }, []string{"one IPv4 and one IPv6", "podSubnet: Invalid value: \"10.244.0.0/16\": dual-stack needs one CIDR per family"}},
		{"dual-stack service, single-stack pods", func(c *ClusterConfiguration) {
			c.Networking.ServiceSubnet = "10.96.0.0/16,fd00:10:96::/112"
			c.Networking.PodSubnet = "10.244.0.0/16"
		}, []string{"one CIDR per family"}},
		{"advertise family differs from services", func(c *ClusterConfiguration) { c.Node.AdvertiseAddress = "fd00::10" }, []string{"advertise address's IP family"}},
		{"addons: unknown CNI provider", func(c *ClusterConfiguration) { c.Addons.CNI.Provider = "calico" }, []string{`addons.cni.provider: Unsupported value: "calico": supported values: "flannel", "none"`}},
		{"addons: provider none with flannel's images", func(c *ClusterConfiguration) { c.Addons.CNI.Provider = CNINone }, []string{
			"addons.cni.image: Forbidden: provider none installs no pod network: remove image, or set provider: flannel",
			"addons.cni.pluginImage: Forbidden: provider none installs no pod network: remove pluginImage, or set provider: flannel"}},
		{"addons: flannel without a pod subnet", func(c *ClusterConfiguration) { c.Networking.PodSubnet = "" }, []string{"addons.cni.provider: Required value: flannel needs networking.podSubnet"}},
		{"addons: untagged flannel image", func(c *ClusterConfiguration) { c.Addons.CNI.Image = "ghcr.io/flannel-io/flannel" }, []string{"addons.cni.image: Invalid value"}},
		{"addons: kube-proxy mode", func(c *ClusterConfiguration) { c.Addons.KubeProxy.Mode = "ipvs" }, []string{`addons.kubeProxy.mode: Unsupported value: "ipvs": supported values: "nftables", "iptables"`}},
		{"addons: untagged image", func(c *ClusterConfiguration) { c.Addons.CoreDNS.Image = "example.com/coredns" }, []string{`addons.coreDNS.image: Invalid value: "example.com/coredns": name a tag or a digest`}},
		{"addons: negative replicas", func(c *ClusterConfiguration) { c.Addons.CoreDNS.Replicas = new(int32(-1)) }, []string{"addons.coreDNS.replicas: Invalid value: -1: must be 0 or more; set disabled: true"}},
		{"addons: extraConfig sets the mode", func(c *ClusterConfiguration) { c.Addons.KubeProxy.ExtraConfig = map[string]any{"mode": "ipvs"} }, []string{"addons.kubeProxy.extraConfig.mode: Forbidden: kubeboot sets mode"}},
		{"version too old", func(c *ClusterConfiguration) { c.KubernetesVersion = "v1.33.4" }, []string{"kubeboot supports v1.34 to v1.36"}},
		{"version too new", func(c *ClusterConfiguration) { c.KubernetesVersion = "v1.37.0" }, []string{"kubeboot supports v1.34 to v1.36"}},
		{"version garbage", func(c *ClusterConfiguration) { c.KubernetesVersion = "latest" }, []string{"want a release version"}},
		{"pre-release", func(c *ClusterConfiguration) { c.KubernetesVersion = "v1.36.0-rc.1" }, []string{"without pre-release"}},
		{"bad node name", func(c *ClusterConfiguration) { c.Node.Name = "Node_1" }, []string{"node.name"}},
		{"bad advertise address", func(c *ClusterConfiguration) { c.Node.AdvertiseAddress = "10.0.0" }, []string{"node.advertiseAddress: Invalid value: \"10.0.0\": want an IP address"}},
		{"unspecified advertise address", func(c *ClusterConfiguration) { c.Node.AdvertiseAddress = "0.0.0.0" }, []string{"not the unspecified one"}},
		{"secondary address of the same family", func(c *ClusterConfiguration) { c.Node.SecondaryAddress = "10.0.0.11" }, []string{
			`node.secondaryAddress: Invalid value: "10.0.0.11": of the same IP family as advertiseAddress`}},
		{"secondary address not an IP", func(c *ClusterConfiguration) { c.Node.SecondaryAddress = "fd00::x" }, []string{`node.secondaryAddress: Invalid value: "fd00::x": want an IP address`}},
		{"loopback secondary address", func(c *ClusterConfiguration) { c.Node.SecondaryAddress = "::1" }, []string{`node.secondaryAddress: Invalid value: "::1": the kubelet refuses`}},
		{"bad endpoint port", func(c *ClusterConfiguration) { c.ControlPlaneEndpoint = "lb.example:70000" }, []string{"controlPlaneEndpoint: Invalid value: \"70000\": port must be between 1 and 65535"}},
		{"bad endpoint host", func(c *ClusterConfiguration) { c.ControlPlaneEndpoint = "lb_1:6443" }, []string{"controlPlaneEndpoint: Invalid value: \"lb_1:6443\": want host or host:port"}},
		{"bad bind port", func(c *ClusterConfiguration) { c.APIServer.BindPort = 70000 }, []string{"apiServer.bindPort"}},
		{"relative path", func(c *ClusterConfiguration) { c.Paths.ManifestsDir = "manifests" }, []string{"paths.manifestsDir: Invalid value: \"manifests\": must be an absolute path"}},
		{"unclean path", func(c *ClusterConfiguration) { c.Certificates.Dir = "/etc/kubernetes//pki/" }, []string{"use /etc/kubernetes/pki"}},
		{"both etcds", func(c *ClusterConfiguration) {
			c.Etcd.External = &ExternalEtcd{Endpoints: []string{"https://a:2379"}, CAFile: "/a", CertFile: "/b", KeyFile: "/c"}
		}, []string{"etcd: Forbidden: set either local or external"}},
		{"external etcd incomplete", func(c *ClusterConfiguration) {
			c.Etcd = Etcd{External: &ExternalEtcd{Endpoints: []string{"10.0.0.2:2379"}, CAFile: "ca.crt"}}
		}, []string{"etcd.external.endpoints[0]", "etcd.external.caFile", "etcd.external.certFile", "etcd.external.keyFile"}},
		{"bad SAN", func(c *ClusterConfiguration) { c.APIServer.CertSANs = []string{"ok.example", "not valid"} }, []string{"apiServer.certSANs[1]"}},
		{"bad extra arg", func(c *ClusterConfiguration) {
			c.Scheduler.ExtraArgs = []Arg{{Name: "--v", Value: "2"}, {Name: "profiling", Value: "x", Remove: true}}
		}, []string{"scheduler.extraArgs[0].name", "scheduler.extraArgs[1].value"}},
		{"control characters in extra args", func(c *ClusterConfiguration) {
			c.APIServer.ExtraArgs = []Arg{{Name: "profiling\n--anonymous-auth", Value: "true"}, {Name: "feature_gates", Value: "A=true"}, {Name: "v", Value: "2\n--anonymous-auth=true"}, {Name: "tls-sni-cert-key", Value: "a\tb"}}
		}, []string{
			`apiServer.extraArgs[0].name: Invalid value: "profiling\n--anonymous-auth": want a flag name of letters, digits and '-'`,
			`apiServer.extraArgs[1].name: Invalid value: "feature_gates"`,
			`apiServer.extraArgs[2].value: Invalid value: "2\n--anonymous-auth=true": must not contain a newline or other control character`,
			`apiServer.extraArgs[3].value`,
		}},
		{"flag names and values that are fine", func(c *ClusterConfiguration) {
			c.Etcd.Local.ExtraArgs = []Arg{{Name: "quota-backend-bytes", Value: "8589934592"}, {Name: "initial-cluster", Value: "a=https://10.0.0.1:2380,b=https://[fd00::1]:2380"}, {Name: "name", Value: "nœud"}}
		}, nil},
		{"control character in an env name", func(c *ClusterConfiguration) { c.Scheduler.ExtraEnv = []EnvVar{{Name: "A\nB", Value: "y"}} }, []string{"scheduler.extraEnv[0].name"}},
		{"bad extra volume", func(c *ClusterConfiguration) {
			c.ControllerManager.ExtraVolumes = []HostPathMount{{Name: "v", HostPath: "rel", MountPath: "/m"}, {Name: "v", HostPath: "/h", MountPath: "/m", PathType: "Dir"}}
		}, []string{"extraVolumes[0].hostPath", "extraVolumes[1].name: Duplicate", "extraVolumes[1].pathType: Unsupported"}},
		{"bad extra env", func(c *ClusterConfiguration) { c.APIServer.ExtraEnv = []EnvVar{{Name: "1X", Value: "y"}} }, []string{"apiServer.extraEnv[0].name"}},
		{"kubeconfigs in the manifest dir", func(c *ClusterConfiguration) { c.Paths.ManifestsDir = "/etc/kubernetes" }, []string{`paths.manifestsDir: Invalid value: "/etc/kubernetes": /etc/kubernetes would be both the manifest directory and the kubeconfig directory (paths.kubeconfigDir); give it a directory of its own such as /etc/kubernetes/manifests`}},
		{"pki in the manifest dir", func(c *ClusterConfiguration) { c.Certificates.Dir = "/etc/kubernetes/manifests" }, []string{"certificates.dir"}},
		{"bad key algorithm", func(c *ClusterConfiguration) { c.Certificates.KeyAlgorithm = "ed25519" }, []string{"certificates.keyAlgorithm: Unsupported value: \"ed25519\""}},
		{"leaf outlives CA", func(c *ClusterConfiguration) { c.Certificates.LeafValidity.Duration = 20 * 365 * 24 * time.Hour }, []string{`certificates.leafValidity: Invalid value: "175200h0m0s"`}},
		{"negative CA validity", func(c *ClusterConfiguration) { c.Certificates.CAValidity.Duration = -time.Hour }, []string{
			`certificates.caValidity: Invalid value: "-1h0m0s": must be positive`, `certificates.leafValidity: Invalid value: "8760h0m0s"`}},
		{"negative renewal window", func(c *ClusterConfiguration) { c.Certificates.RenewBefore.Duration = -5 * time.Minute }, []string{`certificates.renewBefore: Invalid value: "-5m0s"`}},
		{"renewal window too long", func(c *ClusterConfiguration) { c.Certificates.RenewBefore.Duration = 400 * 24 * time.Hour }, []string{`certificates.renewBefore: Invalid value: "9600h0m0s"`}},
		{"bad image repository", func(c *ClusterConfiguration) { c.ImageRepository = "registry.example/" }, []string{"imageRepository"}},
		{"bad timeout", func(c *ClusterConfiguration) { c.Timeouts.ControlPlane.Duration = -5 * time.Minute }, []string{`timeouts.controlPlane: Invalid value: "-5m0s": must be positive`}},
		{"bootstrap token too short-lived", func(c *ClusterConfiguration) { c.BootstrapToken.TTL.Duration = 30 * time.Second }, []string{
			`bootstrapToken.ttl: Invalid value: "30s": must be at least 1m, like 24h`}},
		{"negative bootstrap token lifetime", func(c *ClusterConfiguration) { c.BootstrapToken.TTL.Duration = -time.Hour }, []string{`bootstrapToken.ttl: Invalid value: "-1h0m0s"`}},
		{"untainted control plane is valid", func(c *ClusterConfiguration) { off := false; c.Node.ControlPlaneTaint = &off }, nil},
		{"bad encryption provider", func(c *ClusterConfiguration) { c.Security.EncryptionAtRest.Provider = "aesgcm" }, []string{"security.encryptionAtRest.provider: Unsupported value: \"aesgcm\""}},
		{"bad audit paths and sizes", func(c *ClusterConfiguration) {
			c.Security.Audit.PolicyFile = "policy.yaml"
			c.Security.Audit.LogDir = "/var/log/"
			c.Security.Audit.MaxAge = -1
			c.Security.Audit.MaxSize = -5
		}, []string{"security.audit.policyFile: Invalid value: \"policy.yaml\": must be an absolute path", "security.audit.logDir", "security.audit.maxAge", "security.audit.maxSize"}},
		{"bad TLS", func(c *ClusterConfiguration) {
			c.Security.TLS.MinVersion = "VersionTLS11"
			c.Security.TLS.CipherSuites = []string{"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_RSA_WITH_RC4_128_SHA", "TLS_AES_128_GCM_SHA256"}
		}, []string{"security.tls.minVersion: Unsupported value", "security.tls.cipherSuites[1]", "security.tls.cipherSuites[2]"}},
		{"bad etcd owner", func(c *ClusterConfiguration) { c.Security.EtcdDataDirOwner = "Etcd User" }, []string{"security.etcdDataDirOwner"}},
		{"system dir as etcd data dir", func(c *ClusterConfiguration) { c.Etcd.Local.DataDir = "/var/lib" }, []string{
			`etcd.local.dataDir: Invalid value: "/var/lib": a system directory: kubeboot would chmod and chown it and, on reset, remove it with everything in it; use a directory of its own such as /var/lib/etcd`}},
		{"system dir as audit log dir", func(c *ClusterConfiguration) { c.Security.Audit.LogDir = "/var/log" }, []string{
			`security.audit.logDir: Invalid value: "/var/log": a system directory: kubeboot would chmod it; use a directory of its own such as /var/log/kubernetes/audit`}},
		{"system dir as PKI dir", func(c *ClusterConfiguration) { c.Certificates.Dir = "/etc" }, []string{`certificates.dir: Invalid value: "/etc": a system directory`}},
		{"system file as kubelet config", func(c *ClusterConfiguration) { c.Kubelet.ConfigFile = "/etc/passwd" }, []string{
			`kubelet.configFile: Invalid value: "/etc/passwd": a system file: kubeboot overwrites it and, on reset, removes it; use a file of its own such as /var/lib/kubelet/config.yaml`}},
		{"system dir as kubelet config", func(c *ClusterConfiguration) { c.Kubelet.ConfigFile = "/usr/bin" }, []string{`kubelet.configFile: Invalid value: "/usr/bin": a system file`}},
		{"relative kubelet cert dir", func(c *ClusterConfiguration) { c.Kubelet.CertDir = "pki" }, []string{`kubelet.certDir: Invalid value: "pki": must be an absolute path`}},
		{"kubelet install command by name", func(c *ClusterConfiguration) { c.Kubelet.InstallCommand = []string{"apt-get", "install", "kubelet"} },
			[]string{`kubelet.installCommand[0]: Invalid value: "apt-get": want the program's absolute path, like /usr/bin/apt-get or /bin/sh`}},
		{"kubelet install command with an empty argument", func(c *ClusterConfiguration) { c.Kubelet.InstallCommand = []string{"/bin/sh", "-c", ""} },
			[]string{`kubelet.installCommand[2]: Invalid value: "": want no empty argument`}},
		{"kubelet cert dir as manifest dir", func(c *ClusterConfiguration) { c.Kubelet.CertDir = "/etc/kubernetes/manifests" }, []string{
			`kubelet.certDir: Invalid value: "/etc/kubernetes/manifests": /etc/kubernetes/manifests would be both the kubelet's certificate directory and the manifest directory (paths.manifestsDir); give it a directory of its own such as /var/lib/kubelet/pki`}},
		{"root as kubeconfig dir", func(c *ClusterConfiguration) { c.Paths.KubeconfigDir = "/" }, []string{`paths.kubeconfigDir: Invalid value: "/": a system directory`}},
		{"tmp as manifest dir", func(c *ClusterConfiguration) { c.Paths.ManifestsDir = "/tmp" }, []string{`paths.manifestsDir: Invalid value: "/tmp": a system directory`}},
		{"ancestor of a system dir", func(c *ClusterConfiguration) { c.Etcd.Local.DataDir = "/usr" }, []string{`etcd.local.dataDir: Invalid value: "/usr": a system directory`}},
		{"merged-usr system dir", func(c *ClusterConfiguration) { c.Etcd.Local.DataDir = "/usr/lib" }, []string{`etcd.local.dataDir: Invalid value: "/usr/lib": a system directory`}},
		{"dirs of their own under system dirs", func(c *ClusterConfiguration) {
			c.Etcd.Local.DataDir = "/tmp/kubeboot-lab/etcd"
			c.Security.Audit.LogDir = "/srv/audit"
			c.Certificates.Dir = "/tmp/kubeboot-lab/pki"
			c.Paths.KubeconfigDir = "/tmp/kubeboot-lab"
			c.Paths.ManifestsDir = "/opt/kubeboot/manifests"
		}, nil},
		{"unclean system dir is reported once", func(c *ClusterConfiguration) { c.Certificates.Dir = "/etc/" }, []string{`certificates.dir: Invalid value: "/etc/": not clean: use /etc`}},
		{"kubeboot dirs inside the etcd data dir", func(c *ClusterConfiguration) {
			c.Etcd.Local.DataDir = "/srv/kube"
			c.Certificates.Dir = "/srv/kube/pki"
			c.Security.Audit.LogDir = "/srv/kube"
		}, []string{
			`security.audit.logDir: Invalid value: "/srv/kube": /srv/kube would be both the audit log directory and the etcd data directory (etcd.local.dataDir)`,
			`certificates.dir: Invalid value: "/srv/kube/pki": /srv/kube/pki (the certificates directory) would lie inside the etcd data directory /srv/kube (etcd.local.dataDir), where it has no place: reset removes it with everything in it; give it a directory of its own such as /etc/kubernetes/pki`}},
		{"several errors at once", func(c *ClusterConfiguration) {
			c.Node.AdvertiseAddress = "x"
			c.Networking.DNSDomain = "Cluster_Local"
			c.Paths.KubeconfigDir = "etc"
		}, []string{"node.advertiseAddress", "networking.dnsDomain", "paths.kubeconfigDir"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New()
			SetDefaults(c, testHost)
			tt.modify(c)
			errs := Validate(c)
			if len(errs) != len(tt.want) {
				t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(tt.want), errs.ToAggregate())
			}
			for i, w := range tt.want {
				if !strings.Contains(errs[i].Error(), w) {
					t.Errorf("error %d = %q, want it to contain %q", i, errs[i].Error(), w)
				}
			}
		})
	}
}

func TestValidationErrorsHaveLines(t *testing.T) {
	path := writeConfig(t, header+"node:\n  advertiseAddress: nope\nnetworking:\n  podSubnet: 10.96.0.0/16\n")
	_, err := loadInit(path, testHost)
	if err == nil {
		t.Fatal("want an error")
	}
	for _, w := range []string{"line 4: node.advertiseAddress", "line 6: networking.podSubnet"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q:\n%v", w, err)
		}
	}
}

// TestScheduledRenewal: off unless set, every 12h once set, and an
// interval under a minute is refused with the fix.
func TestScheduledRenewal(t *testing.T) {
	off := New()
	SetDefaults(off, testHost)
	if off.Certificates.ScheduledRenewal != nil {
		t.Fatal("a scheduled renewal without certificates.scheduledRenewal")
	}
	on := New()
	on.Certificates.ScheduledRenewal = &ScheduledRenewal{}
	SetDefaults(on, testHost)
	if got := on.Certificates.ScheduledRenewal.Interval.Duration; got != 12*time.Hour {
		t.Errorf("default interval %s, want 12h", got)
	}
	wantOneError(t, Validate(on), "")
	on.Certificates.ScheduledRenewal.Interval.Duration = 30 * time.Second
	wantOneError(t, Validate(on), `certificates.scheduledRenewal.interval: Invalid value: "30s": too short: at least 1m, like 12h`)
}
