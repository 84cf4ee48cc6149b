//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubeboot/kubeboot/internal/lab"
	"github.com/kubeboot/kubeboot/internal/testsupport"
)

// TestLabKnobs: a LabCluster's knobs, each shown in effect on a lab of a
// control-plane node and a worker:
//   - featureGates reach every component: with ClusterTrustBundle on and
//     runtimeConfig turning certificates.k8s.io/v1beta1 on, the API server
//     serves clustertrustbundles, which needs both; the controller-manager's
//     and scheduler's manifests carry the gate, and the worker's kubelet and
//     kube-proxy report it enabled;
//   - clusterConfigurationPatch: the API server's certificate has the SAN the
//     patch adds, as this host sees it through the lab's endpoint;
//   - extraMounts: a host directory the worker sees read-write (what a pod
//     writes there through a hostPath, the host reads) and one it sees
//     read-only;
//   - portMappings: the host's loopback port answers from the pods of a
//     NodePort Service; a second lab mapping the same port is refused
//     (exit 2), as is one whose port another program holds, and one with
//     a feature gate the release does not know.
func TestLabKnobs(t *testing.T) {
	alongside(t)
	shared, readOnly := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(shared, "from-host"), "the host wrote this\n")
	writeFile(t, filepath.Join(readOnly, "config"), "read me\n")
	hostPort := testsupport.FreePort(t)
	c := startMachineCluster(t, "knobs", "10.89.35.0/24", "10.253.0.0/16", fmt.Sprintf(`
- {name: k1, role: control-plane}
- name: k2
  role: worker
  extraMounts:
  - {hostPath: %s, containerPath: /srv/shared}
  - {hostPath: %s, containerPath: /etc/knobs, readOnly: true}
featureGates: {ClusterTrustBundle: true}
runtimeConfig: {certificates.k8s.io/v1beta1: "true"}
clusterConfigurationPatch:
  apiServer:
    certSANs: [knobs.example]
portMappings: [{hostPort: %d, nodePort: 30080}]
`, shared, readOnly, hostPort))
	r := runCommand(t, kubebootBin, "lab", "up", "--cluster", c.desc, "--bin-dir", binDir, "--package", kubebootDeb)
	if r.code != 0 {
		t.Fatalf("lab up exited %d:\n%s", r.code, testsupport.LastLines(r.stderr, 40))
	}
	t.Logf("TIMING: lab up of two machines with every knob: %s", r.took.Round(time.Millisecond))

	t.Run("featureGates and runtimeConfig", func(t *testing.T) {
		if out := c.kubectl(t, "api-resources", "--api-group=certificates.k8s.io", "-o", "name"); !strings.Contains(out, "clustertrustbundles.certificates.k8s.io") {
			t.Errorf("the API server does not serve clustertrustbundles (it needs the gate and the runtime config):\n%s", out)
		}
		for _, manifest := range []string{"kube-controller-manager", "kube-scheduler", "kube-apiserver"} {
			if out := c.exec(t, "k1", "cat", "/etc/kubernetes/manifests/"+manifest+".yaml"); !strings.Contains(out, "--feature-gates=ClusterTrustBundle=true") {
				t.Errorf("%s's manifest lacks the gate:\n%s", manifest, out)
			}
		}
		enabled := `kubernetes_feature_enabled{name="ClusterTrustBundle",stage="BETA"} 1`
		if out := c.kubectl(t, "get", "--raw", "/api/v1/nodes/k2/proxy/metrics"); !strings.Contains(out, enabled) {
			t.Errorf("k2's kubelet does not report %s", enabled)
		}
		// lab up waits for the nodes, not for each node's kube-proxy, which
		// starts once its kubelet has read the Services.
		var metrics string
		eventually(t, "k2's kube-proxy serving its metrics", func() error {
			r := runCommand(t, kubebootBin, "lab", "exec", "--cluster", c.desc, "k2", "--", "curl", "-sS", "http://127.0.0.1:10249/metrics")
			if r.code != 0 {
				return fmt.Errorf("curl exited %d: %s", r.code, r.stderr)
			}
			metrics = r.stdout
			return nil
		})
		if !strings.Contains(metrics, enabled) {
			t.Errorf("k2's kube-proxy does not report %s", enabled)
		}
	})

	t.Run("clusterConfigurationPatch", func(t *testing.T) {
		endpoint := strings.TrimPrefix(strings.TrimSpace(c.kubectl(t, "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}")), "https://")
		conn, err := tls.Dial("tcp", endpoint, &tls.Config{InsecureSkipVerify: true}) // only the SANs are read
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		if sans := conn.ConnectionState().PeerCertificates[0].DNSNames; !slices.Contains(sans, "knobs.example") {
			t.Errorf("the API server's certificate names %v, want the patch's knobs.example", sans)
		}
	})

	t.Run("extraMounts", func(t *testing.T) {
		if out := c.exec(t, "k2", "cat", "/srv/shared/from-host", "/etc/knobs/config"); out != "the host wrote this\nread me" {
			t.Errorf("k2 reads %q from its mounts", out)
		}
		if r := runCommand(t, kubebootBin, "lab", "exec", "--cluster", c.desc, "k2", "--", "touch", "/etc/knobs/x"); r.code == 0 {
			t.Error("k2 wrote to its read-only mount")
		}
		c.kubectl(t, "run", "writer", "--image="+lab.AgnhostImage, "--restart=Never", "--command", `--overrides={"apiVersion":"v1","spec":{"nodeName":"k2",
			"containers":[{"name":"writer","image":"`+lab.AgnhostImage+`","command":["sh","-c","echo the pod wrote this > /shared/from-pod"],"volumeMounts":[{"name":"s","mountPath":"/shared"}]}],
			"volumes":[{"name":"s","hostPath":{"path":"/srv/shared"}}]}}`, "--", "true")
		c.kubectl(t, "wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/writer", "--timeout=60s")
		if data, err := os.ReadFile(filepath.Join(shared, "from-pod")); err != nil || string(data) != "the pod wrote this\n" {
			t.Errorf("the host reads %q, %v from what the pod wrote", data, err)
		}
	})

	t.Run("portMappings", func(t *testing.T) {
		c.kubectl(t, "create", "deployment", "web", "--image="+lab.AgnhostImage, "--", "/agnhost", "netexec", "--http-port=8080")
		c.kubectl(t, "create", "service", "nodeport", "web", "--tcp=80:8080", "--node-port=30080")
		c.kubectl(t, "rollout", "status", "deployment/web", "--timeout=2m")
		pod := strings.TrimPrefix(strings.TrimSpace(c.kubectl(t, "get", "pods", "-l", "app=web", "-o", "name")), "pod/")
		url := fmt.Sprintf("http://127.0.0.1:%d/hostname", hostPort)
		var got string
		err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return false, err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false, nil // the NodePort may not answer yet
			}
			defer func() { _ = resp.Body.Close() }()
			body, _ := io.ReadAll(resp.Body)
			got = string(body)
			return got == pod, nil
		})
		if err != nil {
			t.Errorf("%s answered %q, want the pod's name %q: %v", url, got, pod, err)
		}

		other := filepath.Join(t.TempDir(), "other.yaml")
		writeFile(t, other, fmt.Sprintf("apiVersion: kubeboot.io/v1alpha1\nkind: LabCluster\nname: knobs2\ndir: %s\nsubnet: 10.89.36.0/24\npodSubnet: 10.254.0.0/16\n"+
			"portMappings: [{hostPort: %d, nodePort: 30080}]\nnodes: [{name: o1, role: control-plane}]\n", filepath.Join(t.TempDir(), "c"), hostPort))
		if r := runCommand(t, kubebootBin, "lab", "up", "--cluster", other, "--bin-dir", binDir, "--package", kubebootDeb); r.code != 2 ||
			!strings.Contains(r.stderr, "portMappings[0].hostPort: "+strconv.Itoa(hostPort)+" collides with lab knobs") {
			t.Errorf("a second lab mapping port %d: exit %d: %s", hostPort, r.code, r.stderr)
		}
		writeFile(t, other, strings.Replace(string(readFile(t, other)), "portMappings:", "featureGates: {NoSuchGate: true}\nportMappings:", 1))
		if r := runCommand(t, kubebootBin, "lab", "up", "--cluster", other, "--bin-dir", binDir, "--package", kubebootDeb); r.code != 2 ||
			!strings.Contains(r.stderr, "featureGates: unrecognized feature gate: NoSuchGate") {
			t.Errorf("a lab with a feature gate the release does not know: exit %d: %s", r.code, r.stderr)
		}
		writeFile(t, other, strings.Replace(string(readFile(t, other)), "featureGates: {NoSuchGate: true}\n", "", 1))
		held, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = held.Close() }()
		heldPort := held.Addr().(*net.TCPAddr).Port
		writeFile(t, other, strings.Replace(string(readFile(t, other)), "hostPort: "+strconv.Itoa(hostPort), "hostPort: "+strconv.Itoa(heldPort), 1))
		if r := runCommand(t, kubebootBin, "lab", "up", "--cluster", other, "--bin-dir", binDir, "--package", kubebootDeb); r.code != 2 ||
			!strings.Contains(r.stderr, "portMappings[0].hostPort: listen tcp 127.0.0.1:"+strconv.Itoa(heldPort)) {
			t.Errorf("a lab mapping a port another program holds: exit %d: %s", r.code, r.stderr)
		}
	})
}
