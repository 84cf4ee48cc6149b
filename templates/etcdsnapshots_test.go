package templates

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/staticpod"
)

// TestEtcdSnapshotsPod pins what the snapshot pod runs and reaches: the
// configured image, `kubeboot etcd snapshot schedule` with the schedule and
// the bucket as flags, the etcd CA and client pair and the S3 files
// mounted read-only one by one, the snapshot dir writable, and nothing the
// kubelet refuses in a static pod. It comes last in All, and only when
// scheduledSnapshots is set.
func TestEtcdSnapshotsPod(t *testing.T) {
	cfg := newConfig(func(c *config.ClusterConfiguration) {
		c.Etcd.Local = &config.LocalEtcd{SnapshotsDir: "/srv/snapshots", ScheduledSnapshots: &config.ScheduledSnapshots{
			Keep: 3, Image: "registry.example/kubeboot:v1",
			S3: &config.S3Storage{Endpoint: "https://10.0.0.9:9000", Bucket: "backups", Prefix: "lab/", CredentialsFile: "/etc/kubeboot/s3", CAFile: "/etc/kubeboot/s3-ca.crt"},
		}}
	})
	pod, err := EtcdSnapshots(cfg, testKubeboot)
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	want := []string{"/usr/bin/kubeboot", "etcd", "snapshot", "schedule", "--bind-address=127.0.0.1", "--cacert=/etc/kubernetes/pki/etcd/ca.crt",
		"--cert=/etc/kubernetes/pki/etcd/healthcheck-client.crt", "--dir=/srv/snapshots", "--endpoint=https://10.0.0.10:2379",
		"--health-port=10271", "--interval=12h0m0s", "--keep=3", "--key=/etc/kubernetes/pki/etcd/healthcheck-client.key", "--node-name=node1",
		"--s3-bucket=backups", "--s3-ca-file=/etc/kubeboot/s3-ca.crt", "--s3-credentials-file=/etc/kubeboot/s3", "--s3-endpoint=https://10.0.0.9:9000", "--s3-prefix=lab/"}
	if pod.Name != config.NameEtcdSnapshots || c.Image != "registry.example/kubeboot:v1" || !slices.Equal(c.Command, want) {
		t.Errorf("pod %s runs %s:\n%q\nwant %s running\n%q", pod.Name, c.Image, c.Command, config.NameEtcdSnapshots, want)
	}
	mounts := map[string]bool{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.ReadOnly
	}
	for path, readOnly := range map[string]bool{"/etc/kubernetes/pki/etcd/ca.crt": true, "/etc/kubernetes/pki/etcd/healthcheck-client.crt": true,
		"/etc/kubernetes/pki/etcd/healthcheck-client.key": true, "/etc/kubeboot/s3": true, "/etc/kubeboot/s3-ca.crt": true, "/srv/snapshots": false,
		"/usr/bin/kubeboot": true} {
		if ro, ok := mounts[path]; !ok || ro != readOnly {
			t.Errorf("mount of %s: present %v, read-only %v; want read-only %v", path, ok, ro, readOnly)
		}
	}
	if len(mounts) != 7 {
		t.Errorf("mounts %v, want exactly those seven", mounts)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Scheme != corev1.URISchemeHTTP || c.Ports[0].ContainerPort != config.PortEtcdSnapshots {
		t.Errorf("readiness probe %+v on port %d", p, c.Ports[0].ContainerPort)
	}
	data, err := Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	if res := staticpod.Validate(config.NameEtcdSnapshots+".yaml", data, "node1"); !res.Accepted || len(res.Warnings) > 0 {
		t.Errorf("the kubelet would refuse it: %v %v", res.Errors, res.Warnings)
	}

	manifests, err := All(cfg, EtcdMembership{}, testKubeboot)
	if err != nil {
		t.Fatal(err)
	}
	if last := manifests[len(manifests)-1].Component; last != config.NameEtcdSnapshots {
		t.Errorf("last manifest %s, want the snapshot pod", last)
	}
	manifests, err = All(newConfig(nil), EtcdMembership{}, testKubeboot)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(manifests, func(m Manifest) bool { return m.Component == config.NameEtcdSnapshots }) {
		t.Error("the snapshot pod is rendered without scheduledSnapshots")
	}
}

// TestEtcdSnapshotsPodTrustsTheNodesCAs: a bucket without s3.caFile is
// trusted through the node's CAs, which the pause image does not hold, so
// the pod mounts the node's CA bundles read-only; with s3.caFile it mounts
// that file alone.
func TestEtcdSnapshotsPodTrustsTheNodesCAs(t *testing.T) {
	for _, caFile := range []string{"", "/etc/kubeboot/s3-ca.crt"} {
		cfg := newConfig(func(c *config.ClusterConfiguration) {
			c.Etcd.Local = &config.LocalEtcd{ScheduledSnapshots: &config.ScheduledSnapshots{
				S3: &config.S3Storage{Endpoint: "https://s3.example.com", Bucket: "backups", CredentialsFile: "/etc/kubeboot/s3", CAFile: caFile},
			}}
		})
		pod, err := EtcdSnapshots(cfg, testKubeboot)
		if err != nil {
			t.Fatal(err)
		}
		mounted := map[string]bool{}
		for _, m := range pod.Spec.Containers[0].VolumeMounts {
			mounted[m.MountPath] = m.ReadOnly
		}
		if ro, ok := mounted["/etc/ssl/certs"]; ok != (caFile == "") || ok && !ro {
			t.Errorf("s3.caFile %q: /etc/ssl/certs mounted %v (read-only %v), want %v", caFile, ok, ro, caFile == "")
		}
	}
}
