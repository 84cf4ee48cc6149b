//go:build e2e

package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
)

// What TestClusterObjects checks with the cluster's clients: anonymous,
// a joining node's bootstrap token, and the token commands.

// anonymousClient verifies the API server with the cluster CA and sends
// no credentials.
func anonymousClient(t *testing.T, n *node) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(readFile(t, n.path("pki/ca.crt"))) {
		t.Fatal("ca.crt holds no certificate")
	}
	return n.httpClient(&tls.Config{RootCAs: pool})
}

const clusterInfoPath = "/api/v1/namespaces/kube-public/configmaps/cluster-info"

func checkAnonymous(t *testing.T, n *node, tokenID string) {
	client := anonymousClient(t, n)
	eventually(t, "cluster-info signed for token "+tokenID, func() error {
		resp, err := client.Get(n.apiURL(clusterInfoPath))
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("anonymous GET cluster-info: %s: %s", resp.Status, body)
		}
		var cm corev1.ConfigMap
		if err := json.Unmarshal(body, &cm); err != nil {
			return err
		}
		kubeconfig, err := clientcmd.Load([]byte(cm.Data["kubeconfig"]))
		if err != nil {
			t.Fatalf("the kubeconfig of cluster-info does not parse: %v", err)
		}
		cluster := kubeconfig.Clusters[""]
		if cluster == nil || cluster.Server != n.apiURL("") || string(cluster.CertificateAuthorityData) != string(readFile(t, n.path("pki/ca.crt"))) || len(kubeconfig.AuthInfos) != 0 {
			t.Fatalf("cluster-info kubeconfig: %+v", kubeconfig)
		}
		if _, ok := cm.Data["jws-kubeconfig-"+tokenID]; !ok {
			return fmt.Errorf("no jws-kubeconfig-%s key yet: %v", tokenID, keys(cm.Data))
		}
		return nil
	})
	for _, path := range []string{"/version", "/api/v1/namespaces", "/api/v1/namespaces/kube-public/configmaps", "/api/v1/namespaces/kube-system/configmaps/kubeadm-config"} {
		resp, err := client.Get(n.apiURL(path))
		if err != nil {
			t.Errorf("GET %s: %v", path, err)
			continue
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
			t.Errorf("anonymous GET %s: %s, want 401 or 403", path, resp.Status)
		}
	}
	// The path admits anonymous requests; RBAC admits only get.
	req, err := http.NewRequest(http.MethodDelete, n.apiURL(clusterInfoPath), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("anonymous DELETE of cluster-info: %s, want 403", resp.Status)
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// checkTokenGrants uses the token as a joining node would, before its TLS
// bootstrap: it may read what kubeadm join reads, and no more.
func checkTokenGrants(t *testing.T, n *node, token string) {
	client := anonymousClient(t, n)
	for path, want := range map[string]int{
		"/api/v1/namespaces/kube-system/configmaps/kubeadm-config": http.StatusOK,
		"/api/v1/namespaces/kube-system/configmaps/kubelet-config": http.StatusOK,
		// kubeboot's own configuration is for administrators alone.
		"/api/v1/namespaces/kube-system/configmaps/kubeboot-config": http.StatusForbidden,
		"/api/v1/nodes/" + n.name:                                   http.StatusOK,
		"/api/v1/namespaces/kube-system/secrets":                    http.StatusForbidden,
		"/api/v1/nodes":                                             http.StatusForbidden,
	} {
		req, err := http.NewRequest(http.MethodGet, n.apiURL(path), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			t.Errorf("GET %s: %v", path, err)
			continue
		}
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s with the bootstrap token: %s, want %d", path, resp.Status, want)
		}
	}
}

// checkTokenCommands creates a token with a discovery file, lists it and
// deletes it.
func checkTokenCommands(t *testing.T, n *node) {
	discovery := n.path("discovery.conf")
	r := n.kubeboot(t, "token", "create", "--config", n.config, "--ttl", "2h", "--discovery-file", discovery, "-o", "json")
	if r.code != 0 {
		t.Fatalf("token create exited %d: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	var created struct {
		Result struct {
			OK          bool      `json:"ok"`
			ID          string    `json:"id"`
			Token       string    `json:"token"`
			Expires     time.Time `json:"expires"`
			JoinCommand string    `json:"joinCommand"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &created); err != nil || !created.Result.OK {
		t.Fatalf("token create result (%v): %s", err, r.stdout)
	}
	c := created.Result
	if left := time.Until(c.Expires); left < time.Hour+50*time.Minute || left > 2*time.Hour+10*time.Minute {
		t.Errorf("--ttl 2h: the token expires in %s", left)
	}
	checkJoinCommand(t, n, c.JoinCommand)
	_, secret, _ := strings.Cut(c.Token, ".")
	for _, line := range lines[:len(lines)-1] {
		if strings.Contains(line, secret) {
			t.Errorf("an event of token create shows the secret: %s", line)
		}
	}
	if info, err := os.Stat(discovery); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("discovery file: %v %v", info, err)
	}
	kubeconfig, err := clientcmd.LoadFromFile(discovery)
	if err != nil {
		t.Fatal(err)
	}
	rest, err := clientcmd.NewDefaultClientConfig(*kubeconfig, nil).ClientConfig()
	if err != nil || rest.BearerToken != c.Token || rest.Host != n.apiURL("") {
		t.Errorf("discovery file: %v, host %s", err, rest.Host)
	}

	r = n.kubeboot(t, "token", "list", "--config", n.config)
	if r.code != 0 || !strings.Contains(r.stdout, c.ID+"  ") || strings.Contains(r.stdout, secret) {
		t.Errorf("token list exited %d:\n%s", r.code, r.stdout)
	}
	r = n.kubeboot(t, "token", "delete", "--config", n.config, c.ID)
	if r.code != 0 {
		t.Fatalf("token delete exited %d: %s", r.code, r.stderr)
	}
	if _, err := n.kubectlErr(t, "get", "secret", "-n", "kube-system", "bootstrap-token-"+c.ID); err == nil {
		t.Error("token delete left the Secret")
	}
	r = n.kubeboot(t, "token", "list", "--config", n.config, "-o", "json")
	if r.code != 0 || strings.Contains(r.stdout, `"id":"`+c.ID+`"`) {
		t.Errorf("token list after delete:\n%s", r.stdout)
	}
}
