// Package phasestest holds test helpers for the packages built on phases
// (join, day2) and for phases' external tests: a State on a throw-away
// root, running phases, reading and comparing the files they write, and a
// real CRI runtime (kubeboot's lab runtime) to check images against.
package phasestest

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/files"
	"github.com/kubeboot/kubeboot/lab"
	"github.com/kubeboot/kubeboot/output"
	"github.com/kubeboot/kubeboot/phases"
)

// NewState is a quiet State for node1 (10.0.0.10) at version, writing under root.
func NewState(t testing.TB, root, version string) *phases.State {
	t.Helper()
	c := config.New()
	c.KubernetesVersion = version
	config.SetDefaults(c, config.Host{Name: "node1", Address: "10.0.0.10"})
	if errs := config.Validate(c); len(errs) > 0 {
		t.Fatal(errs.ToAggregate())
	}
	return &phases.State{Config: c, Files: &files.AtomicWriter{Root: root}, Report: output.NewReporter(&bytes.Buffer{}, false)}
}

// Run runs the given phases of s in order.
func Run(s *phases.State, list ...phases.Phase) error {
	_, err := phases.Runner{Phases: list}.Run(context.Background(), s, nil)
	return err
}

// HostFile reads a node path of s.
func HostFile(t testing.TB, s *phases.State, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(s.Files.HostPath(path))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// ParseCert parses the certificate name of s's PKI.
func ParseCert(t testing.TB, s *phases.State, name string) *x509.Certificate {
	t.Helper()
	data := HostFile(t, s, s.Config.CertPath(name))
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("no PEM block in %s", name)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// FileState is what a re-run must not change about a file.
type FileState struct {
	// ModTime, Mode and Content are the file's.
	ModTime time.Time
	Mode    fs.FileMode
	Content string
}

// Snapshot records every file under root, by path relative to root.
func Snapshot(t testing.TB, root string) map[string]FileState {
	t.Helper()
	out := map[string]FileState{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		out[strings.TrimPrefix(path, root)] = FileState{info.ModTime(), info.Mode(), string(data)}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// ServeRuntime runs kubeboot's lab CRI runtime on the unix socket sock
// until the test ends, with a bin dir holding only the given binaries, so
// that the runtime holds exactly those images (registry.k8s.io/<name>:...).
func ServeRuntime(t testing.TB, sock string, binaries ...string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range binaries {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rt, err := lab.NewRuntime(lab.Options{BinDir: bin, StateDir: filepath.Join(dir, "state"), HostIP: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- rt.Serve(ctx, sock) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("the lab runtime on %s: %v", sock, err)
		}
	})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lab runtime did not create %s", sock)
		}
	}
}
