package app

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/testsupport"
)

// unreachableKubeconfig is a kubeconfig for an API server that is not
// there, as before the control plane is up.
const unreachableKubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: not-a-secret}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`

// TestCSRApproverCommand runs the approver without an API server: its
// /healthz answers at once and /readyz not, it stops cleanly when its
// context ends (SIGTERM), and it exits 0 when its kubeconfig is renewed.
func TestCSRApproverCommand(t *testing.T) {
	for _, tc := range []struct {
		name   string
		renew  bool
		wantOK string
	}{
		{"stopped", false, "stopped"},
		{"kubeconfig renewed", true, "changed: exiting, for the kubelet to start the approver with the new one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := writeFile(t, dir, "csr-approver.conf", unreachableKubeconfig)
			opts := &csrApproverOptions{kubeconfig: path, bindAddress: "127.0.0.1", healthPort: testsupport.FreePort(t), recheck: 10 * time.Millisecond}
			var log testsupport.SyncBuffer
			report := output.NewReporter(&log, false)
			report.SetPhase("csr-approver")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- opts.run(ctx, report) }()

			base := "http://127.0.0.1:" + strconv.Itoa(opts.healthPort)
			if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				return httpStatus(base+"/healthz") == http.StatusOK, nil
			}); err != nil {
				t.Fatalf("/healthz never answered: %v\n%s", err, log.String())
			}
			if code := httpStatus(base + "/readyz"); code != http.StatusServiceUnavailable {
				t.Errorf("/readyz without an API server: %d, want 503", code)
			}
			if tc.renew {
				writeFile(t, dir, "csr-approver.conf", unreachableKubeconfig+"# renewed\n")
			} else {
				cancel()
			}
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("run: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("run did not return:\n%s", log.String())
			}
			if !strings.Contains(log.String(), tc.wantOK) || !strings.HasPrefix(log.String(), "[csr-approver] ") || strings.Contains(log.String(), "not-a-secret") {
				t.Errorf("log lacks %q, or shows the credential:\n%s", tc.wantOK, log.String())
			}
			if code := httpStatus(base + "/healthz"); code != 0 {
				t.Errorf("/healthz still served after the run: %d", code)
			}
		})
	}
}

// httpStatus is the status of a GET, or 0 when nothing answers.
func httpStatus(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func TestCSRApproverCommandUsage(t *testing.T) {
	if code, _, stderr := runCLI(t, "csr-approver", "--health-port", "0"); code != 2 || !strings.Contains(stderr, "--health-port 0: not a port") {
		t.Errorf("exit %d: %s", code, stderr)
	}
	if code, _, stderr := runCLI(t, "csr-approver", "--kubeconfig", filepath.Join(t.TempDir(), "missing.conf")); code != 1 || !strings.Contains(stderr, "read kubeconfig") {
		t.Errorf("exit %d: %s", code, stderr)
	}
}
