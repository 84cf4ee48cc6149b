package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BenchmarkProcess runs kubeboot, built once as make build builds it, as
// a process: "version" is its start alone (the runtime and the init of
// every package it links), "converged-init" a re-run of init under --root
// on a node the first run wrote, which must check every file and write
// none (test/bench's "converged re-run" times the same under GNU time).
func BenchmarkProcess(b *testing.B) {
	dir := b.TempDir()
	bin := filepath.Join(dir, "kubeboot")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v: %s", err, out)
	}
	cfg := filepath.Join(dir, "cluster.yaml")
	if err := os.WriteFile(cfg, []byte("apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\nkubernetesVersion: v1.36.3\n"+
		"node:\n  name: node1\n  advertiseAddress: 10.0.0.10\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	initArgs := []string{"init", "--root", filepath.Join(dir, "root"), "--skip-phases", "wait,bootstrap-admin", "--config", cfg, "-o", "json"}
	run := func(b *testing.B, args ...string) []byte {
		b.Helper()
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			b.Fatalf("kubeboot %v: %v: %s", args, err, out)
		}
		return out
	}
	run(b, initArgs...)
	b.Run("version", func(b *testing.B) {
		for b.Loop() {
			run(b, "version")
		}
	})
	b.Run("converged-init", func(b *testing.B) {
		for b.Loop() {
			if out := run(b, initArgs...); !bytes.Contains(out, []byte(`"written":[]`)) {
				b.Fatalf("a converged init wrote files: %s", out)
			}
		}
	})
}
