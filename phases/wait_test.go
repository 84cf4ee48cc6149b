package phases

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/health"
	"github.com/kubeboot/kubeboot/internal/testsupport"
)

// deadNode is a node with its PKI and manifests written on 127.0.0.1, where
// no component runs.
func deadNode(t *testing.T) *Node {
	t.Helper()
	s := manifestState(t, t.TempDir(), "v1.36.3")
	s.Config.Node.AdvertiseAddress = "127.0.0.1"
	s.Config.APIServer.BindPort = int32(testsupport.FreePort(t))
	s.Config.Timeouts.ControlPlane.Duration = 300 * time.Millisecond
	must(t, runPKIPhases(s))
	must(t, renderAndWrite(s))
	return s
}

func TestWaitTimesOutWithDiagnostic(t *testing.T) {
	s := deadNode(t)
	writeHostFile(t, s, s.Config.Paths.ManifestsDir+"/kube-apiserver.yaml.bak", "")

	err := Wait.Run(context.Background(), s)
	var notHealthy *health.NotHealthyError
	if !errors.As(err, &notHealthy) || notHealthy.ExitCode() != 4 {
		t.Fatalf("want a NotHealthyError with exit code 4, got %v", err)
	}
	for _, want := range append(config.ComponentNames, "kube-apiserver.yaml.bak", "kubeboot validate") {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("diagnostic lacks %q:\n%v", want, err)
		}
	}
}

func TestWaitNeedsManifests(t *testing.T) {
	s := manifestState(t, t.TempDir(), "v1.36.3")
	err := Wait.Run(context.Background(), s)
	if err == nil || !strings.Contains(err.Error(), "run `kubeboot init phase write-manifests` first") {
		t.Errorf("want a hint to write the manifests first, got %v", err)
	}
}

func TestWaitNamesMissingManifest(t *testing.T) {
	s := deadNode(t)
	must(t, s.Files.Remove(s.Config.ManifestPath(config.NameScheduler)))
	err := Wait.Run(context.Background(), s)
	var notHealthy *health.NotHealthyError
	if !errors.As(err, &notHealthy) || !strings.Contains(err.Error(), "also: kube-scheduler.yaml missing from") {
		t.Fatalf("want exit 4 naming the missing manifest, got %v", err)
	}
}
