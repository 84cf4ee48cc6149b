package app

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"runtime/debug"
	"testing"

	"github.com/kubeboot/kubeboot/internal/output"
)

// TestServeHealthCollectsAsGoDoes: a pod of kubeboot's, which serves its
// health, goes back to Go's default GC percent from a short command's.
func TestServeHealthCollectsAsGoDoes(t *testing.T) {
	if os.Getenv("GOGC") != "" {
		t.Skip("GOGC sets the GC percent")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(shortRunGCPercent))
	_, stop, err := serveHealth(context.Background(), "127.0.0.1", 0, http.NotFoundHandler(), output.NewReporter(&bytes.Buffer{}, false))
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if got := debug.SetGCPercent(shortRunGCPercent); got != 100 {
		t.Errorf("GC percent while serving: %d, want Go's default of 100", got)
	}
}
