package tokens_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/tokens"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
	"github.com/kubeboot/kubeboot/pki"
)

// cluster is a control-plane node with a cluster CA and admin.conf under
// a temp root, connected to a fake API server; what it reports is in the
// returned buffer.
func cluster(t *testing.T) (tokens.Cluster, *fake.Clientset, *bytes.Buffer) {
	t.Helper()
	c, _, client, reported := clusterOfNode(t)
	return c, client, reported
}

// clusterOfNode is cluster, with its node.
func clusterOfNode(t *testing.T) (tokens.Cluster, *phases.Node, *fake.Clientset, *bytes.Buffer) {
	t.Helper()
	root := t.TempDir()
	s := phasestest.NewNode(t, root, config.DefaultKubernetesVersion)
	var reported bytes.Buffer
	s.Report = output.NewReporter(&reported, false)
	ca, err := pki.NewCA(pki.CertSpec{Name: "ca", CN: "kubernetes", Algorithm: config.ECDSAP256, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for path, data := range map[string][]byte{
		s.Config.CertPath(config.CertCA):                ca.Cert,
		s.Config.KubeconfigPath(config.KubeconfigAdmin): []byte("apiVersion: v1\nkind: Config\n"),
	} {
		if err := os.MkdirAll(filepath.Dir(s.Files.HostPath(path)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(s.Files.HostPath(path), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	client := fake.NewClientset()
	c, err := tokens.Connect(s, func(kubeconfig []byte) (kubernetes.Interface, error) {
		if string(kubeconfig) != "apiVersion: v1\nkind: Config\n" {
			t.Errorf("the client was built from %q, not admin.conf", kubeconfig)
		}
		return client, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return c, s, client, &reported
}

// secrets lists the token Secrets of client.
func secrets(t *testing.T, client kubernetes.Interface) []corev1.Secret {
	t.Helper()
	list, err := client.CoreV1().Secrets(bootstraptoken.Namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func TestConnectNeedsAdminConf(t *testing.T) {
	s := phasestest.NewNode(t, t.TempDir(), config.DefaultKubernetesVersion)
	_, err := tokens.Connect(s, func([]byte) (kubernetes.Interface, error) {
		t.Fatal("a client was built without admin.conf")
		return nil, nil
	})
	if err == nil || !strings.Contains(err.Error(), "the token commands use admin.conf") {
		t.Errorf("got %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(s.Files.HostPath(s.Config.KubeconfigPath(config.KubeconfigAdmin))), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.Files.HostPath(s.Config.KubeconfigPath(config.KubeconfigAdmin)), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = tokens.Connect(s, func([]byte) (kubernetes.Interface, error) { return nil, errors.New("bad kubeconfig") })
	if err == nil || !strings.Contains(err.Error(), "load ") || !strings.Contains(err.Error(), "bad kubeconfig") {
		t.Errorf("got %v", err)
	}
}

// TestCreate: the token, its join command and its expiry (the
// configuration's ttl by default), reported without the secret.
func TestCreate(t *testing.T) {
	c, node, client, reported := clusterOfNode(t)
	now := time.Now()
	res, err := tokens.Create(context.Background(), c, tokens.CreateOptions{Description: "test"}, now)
	if err != nil {
		t.Fatal(err)
	}
	token, err := bootstraptoken.Parse(res.Token)
	if err != nil || token.ID != res.ID {
		t.Fatalf("created %+v: %v", res, err)
	}
	if want := now.Add(node.Config.BootstrapToken.TTL.Duration); res.Expires.Sub(want).Abs() > time.Second {
		t.Errorf("expires %s, want %s", res.Expires, want)
	}
	hash, err := phases.CAHash(node)
	if err != nil {
		t.Fatal(err)
	}
	if want := phases.JoinCommand(phases.JoinEndpoint(node.Config), token, hash); res.JoinCommand != want {
		t.Errorf("join command %q, want %q", res.JoinCommand, want)
	}
	if res.DiscoveryFile != "" || res.Discovery != nil {
		t.Errorf("a discovery file nobody asked for: %+v", res)
	}
	got := secrets(t, client)
	if len(got) != 1 {
		t.Fatalf("%d Secrets", len(got))
	}
	info, err := bootstraptoken.FromSecret(&got[0])
	if err != nil || info.Token != token || info.CreatedBy != phases.CreatedByTokenCreate || info.Description != "test" {
		t.Errorf("Secret %+v: %v", info, err)
	}
	if !strings.Contains(reported.String(), "Secret kube-system/bootstrap-token-"+token.ID+" created") || strings.Contains(reported.String(), token.Secret) {
		t.Errorf("reported %q", reported.String())
	}

	res, err = tokens.Create(context.Background(), c, tokens.CreateOptions{TTL: 2 * time.Hour}, now)
	if err != nil || res.Expires.Sub(now.Add(2*time.Hour)).Abs() > time.Second {
		t.Errorf("TTL 2h: expires %s, %v", res.Expires, err)
	}
}

// TestCreateDiscovery: the discovery file, written or returned, holds the
// CA, the endpoint and the token; one that cannot be written leaves no
// token behind.
func TestCreateDiscovery(t *testing.T) {
	c, node, client, reported := clusterOfNode(t)
	check := func(data []byte, token string) {
		t.Helper()
		kubeconfig, err := clientcmd.Load(data)
		if err != nil {
			t.Fatal(err)
		}
		rest, err := clientcmd.NewDefaultClientConfig(*kubeconfig, nil).ClientConfig()
		if err != nil {
			t.Fatal(err)
		}
		ca := phasestest.HostFile(t, node, node.Config.CertPath(config.CertCA))
		if rest.Host != node.Config.ControlPlaneURL() || rest.BearerToken != token || !bytes.Equal(rest.CAData, ca) {
			t.Errorf("discovery file: host %s, token matches %v, CA matches %v", rest.Host, rest.BearerToken == token, bytes.Equal(rest.CAData, ca))
		}
	}

	path := filepath.Join(t.TempDir(), "new", "discovery.conf")
	res, err := tokens.Create(context.Background(), c, tokens.CreateOptions{DiscoveryFile: path}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if res.DiscoveryFile != path {
		t.Errorf("discovery file %q, want %q", res.DiscoveryFile, path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	check(data, res.Token)
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700} {
		if info, err := os.Stat(p); err != nil || info.Mode().Perm() != want {
			t.Errorf("%s: %v, %v; want mode %v", p, info, err, want)
		}
	}
	if !strings.Contains(reported.String(), "wrote the discovery file "+path+" (mode 0600)") {
		t.Errorf("reported %q", reported.String())
	}

	res, err = tokens.Create(context.Background(), c, tokens.CreateOptions{DiscoveryContent: true}, time.Now())
	if err != nil || res.DiscoveryFile != "" {
		t.Fatalf("%+v, %v", res, err)
	}
	check(res.Discovery, res.Token)

	if _, err := tokens.Create(context.Background(), c, tokens.CreateOptions{DiscoveryFile: "/proc/kubeboot-test.conf"}, time.Now()); err == nil || !strings.Contains(err.Error(), "--discovery-file: write") {
		t.Errorf("an unwritable discovery file: %v", err)
	}
	if got := len(secrets(t, client)); got != 2 {
		t.Errorf("%d tokens after a failed write, want 2", got)
	}
}

func TestCheckDiscoveryFile(t *testing.T) {
	dir := t.TempDir()
	if err := tokens.CheckDiscoveryFile(filepath.Join(dir, "new.conf")); err != nil {
		t.Errorf("a new file: %v", err)
	}
	var usage *exit.UsageError
	if err := tokens.CheckDiscoveryFile(dir); !errors.As(err, &usage) || !strings.Contains(err.Error(), "--discovery-file") {
		t.Errorf("a directory: %v", err)
	}
}

// TestListAndDelete: List shows no secret, says what it cannot read, and
// never has a nil usage or group list; Delete stops at the first token
// it cannot delete, saying which it deleted before.
func TestListAndDelete(t *testing.T) {
	c, client, reported := cluster(t)
	var made []tokens.Created
	for range 2 {
		res, err := tokens.Create(context.Background(), c, tokens.CreateOptions{}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, res)
	}
	broken := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: bootstraptoken.SecretName("zzzzzz"), Namespace: bootstraptoken.Namespace}, Type: bootstraptoken.SecretType}
	if _, err := client.CoreV1().Secrets(bootstraptoken.Namespace).Create(context.Background(), broken, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	list, err := tokens.List(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, l := range list {
		ids = append(ids, l.ID)
		if l.Usages == nil || l.Groups == nil || !slices.Contains(l.Groups, bootstraptoken.NodeGroup) {
			t.Errorf("listed %+v", l)
		}
	}
	slices.Sort(ids)
	want := []string{made[0].ID, made[1].ID}
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Errorf("listed %v, want %v", ids, want)
	}
	if !strings.Contains(reported.String(), "zzzzzz") {
		t.Errorf("the unreadable Secret went unreported: %q", reported.String())
	}

	deleted, err := tokens.Delete(context.Background(), c, []string{made[0].ID, "aaaaaa", made[1].ID})
	if err == nil || !slices.Equal(deleted, []string{made[0].ID}) {
		t.Errorf("deleted %v, %v", deleted, err)
	}
	deleted, err = tokens.Delete(context.Background(), c, nil)
	if err != nil || deleted == nil || len(deleted) != 0 {
		t.Errorf("deleting nothing: %v, %v", deleted, err)
	}
}

// TestIDs: a token ID or a whole token names a token; anything else is a
// usage error that does not quote it.
func TestIDs(t *testing.T) {
	ids, err := tokens.IDs([]string{"abcdef", "ghijkl.0123456789abcdef"})
	if err != nil || !slices.Equal(ids, []string{"abcdef", "ghijkl"}) {
		t.Errorf("got %v, %v", ids, err)
	}
	var usage *exit.UsageError
	_, err = tokens.IDs([]string{"abcdef", "abcdef.0123456789ABCDEF"})
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), "argument 2 is neither") || strings.Contains(err.Error(), "0123456789") {
		t.Errorf("a mistyped token: %v", err)
	}
}

// TestConnectClient: with an administrator's client on any machine, a
// token's join command names the endpoint and CA pin the cluster
// publishes in cluster-info, its discovery file the cluster's
// name from kubeadm-config, and it is valid for the default ttl.
func TestConnectClient(t *testing.T) {
	ca, err := pki.NewCA(pki.CertSpec{Name: "ca", CN: "kubernetes", Algorithm: config.ECDSAP256, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	info, err := pki.DiscoveryKubeconfig("", "https://10.0.0.100:6443", ca.Cert, "")
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-public", Name: "cluster-info"}, Data: map[string]string{"kubeconfig": string(info)}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kubeadm-config"}, Data: map[string]string{"ClusterConfiguration": "clusterName: prod\n"}},
	)
	var reported bytes.Buffer
	c, err := tokens.ConnectClient(context.Background(), client, output.NewReporter(&reported, false))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	res, err := tokens.Create(context.Background(), c, tokens.CreateOptions{DiscoveryContent: true}, now)
	if err != nil {
		t.Fatal(err)
	}
	hash, err := pki.CACertHash(ca.Cert)
	if err != nil {
		t.Fatal(err)
	}
	if want := "kubeboot join 10.0.0.100:6443 --token " + res.Token + " --discovery-token-ca-cert-hash " + hash; res.JoinCommand != want {
		t.Errorf("join command %q, want %q", res.JoinCommand, want)
	}
	if want := now.Add(config.DefaultBootstrapTokenTTL); res.Expires.Sub(want).Abs() > time.Second {
		t.Errorf("expires %s, want %s", res.Expires, want)
	}
	discovery, err := clientcmd.Load(res.Discovery)
	if err != nil {
		t.Fatal(err)
	}
	if cluster := discovery.Clusters["prod"]; cluster == nil || cluster.Server != "https://10.0.0.100:6443" || !bytes.Equal(cluster.CertificateAuthorityData, ca.Cert) {
		t.Errorf("discovery file's clusters: %+v", discovery.Clusters)
	}
	if !strings.Contains(reported.String(), "Secret kube-system/bootstrap-token-"+res.ID+" created") {
		t.Errorf("reported %q", reported.String())
	}

	_, err = tokens.ConnectClient(context.Background(), fake.NewClientset(), output.NewReporter(&reported, false))
	if err == nil || !strings.Contains(err.Error(), "kube-public/cluster-info") {
		t.Errorf("a cluster without cluster-info: %v", err)
	}
}
