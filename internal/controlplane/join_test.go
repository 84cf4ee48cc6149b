package controlplane

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/phases/phasestest"
)

func TestJoinPreflightRefusesAnotherClustersEndpoint(t *testing.T) {
	_, secrets := exportedNode(t)
	// httptest's certificate is not from the bundle's CA: another cluster.
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	node := phasestest.NewNode(t, t.TempDir(), config.DefaultKubernetesVersion)
	node.Config.ControlPlaneEndpoint = strings.TrimPrefix(srv.URL, "https://")
	s := &JoinNode{Node: node, Secrets: secrets}
	err := JoinPreflight.Run(context.Background(), s)
	if err == nil || !strings.Contains(err.Error(), "not from the bundle's cluster CA") {
		t.Fatalf("JoinPreflight against a foreign endpoint: %v", err)
	}
	// Without a bundle, the node's own CA is required.
	s.Secrets = nil
	err = JoinPreflight.Run(context.Background(), s)
	if err == nil || !strings.Contains(err.Error(), "pass --certs-bundle") {
		t.Fatalf("JoinPreflight without a bundle or CA: %v", err)
	}
}
