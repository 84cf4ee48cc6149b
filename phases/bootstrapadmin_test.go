package phases

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/files"
	"github.com/kubeboot/kubeboot/output"
)

// bindingStore serves the ClusterRoleBinding endpoints from memory and logs
// every mutating request.
type bindingStore struct {
	mu       sync.Mutex
	bindings map[string]rbacv1.ClusterRoleBinding
	writes   []string
}

func (b *bindingStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	defer b.mu.Unlock()
	name := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, bindingsPath), "/")
	if r.Method != http.MethodGet {
		b.writes = append(b.writes, r.Method+" "+name)
	}
	switch r.Method {
	case http.MethodGet:
		crb, ok := b.bindings[name]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"kind":"Status","message":"not found"}`))
			return
		}
		_ = json.NewEncoder(w).Encode(crb)
	case http.MethodPost, http.MethodPut:
		var crb rbacv1.ClusterRoleBinding
		if err := json.NewDecoder(r.Body).Decode(&crb); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		crb.ResourceVersion = "1"
		b.bindings[crb.Name] = crb
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(crb)
	case http.MethodDelete:
		delete(b.bindings, name)
	}
}

func TestBootstrapAdminConverges(t *testing.T) {
	store := &bindingStore{bindings: map[string]rbacv1.ClusterRoleBinding{}}
	server := httptest.NewTLSServer(store)
	defer server.Close()

	c := config.New()
	config.SetDefaults(c, config.Host{Name: "node1", Address: "127.0.0.1"})
	var out bytes.Buffer
	s := &State{Config: c, Files: &files.AtomicWriter{Root: t.TempDir()}, Report: output.NewReporter(&out, false)}
	kubeconfig, err := clientcmd.Write(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"k": {Server: server.URL, CertificateAuthorityData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: server.Certificate().Raw})}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"k": {Token: "t"}},
		Contexts:       map[string]*clientcmdapi.Context{"k": {Cluster: "k", AuthInfo: "k"}},
		CurrentContext: "k",
	})
	if err != nil {
		t.Fatal(err)
	}
	must(t, s.Files.WriteFile(c.KubeconfigPath(config.KubeconfigSuperAdmin), kubeconfig, 0o600))

	steps := []struct {
		name   string
		before func()
		writes []string
	}{
		{"fresh cluster", func() {}, []string{"POST ", "POST "}},
		{"re-run", func() {}, nil},
		{"subject drifted", func() {
			crb := store.bindings[clusterAdminsGroup]
			crb.Subjects[0].Name = "someone-else"
			store.bindings[clusterAdminsGroup] = crb
		}, []string{"PUT " + clusterAdminsGroup}},
		{"role drifted", func() {
			crb := store.bindings[kubeletClientBinding]
			crb.RoleRef.Name = "view"
			store.bindings[kubeletClientBinding] = crb
		}, []string{"DELETE " + kubeletClientBinding, "POST "}},
	}
	for _, step := range steps {
		store.writes = nil
		step.before()
		if err := runBootstrapAdmin(context.Background(), s); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if diff := cmp.Diff(step.writes, store.writes); diff != "" {
			t.Errorf("%s: writes (-want +got):\n%s", step.name, diff)
		}
	}
	for _, want := range adminBindings() {
		have := store.bindings[want.Name]
		if !cmp.Equal(have.RoleRef, want.RoleRef) || !cmp.Equal(have.Subjects, want.Subjects) {
			t.Errorf("binding %s = %+v, want %+v", want.Name, have, want)
		}
	}
}

func TestBootstrapAdminNeedsKubeconfig(t *testing.T) {
	c := config.New()
	config.SetDefaults(c, config.Host{Name: "node1", Address: "127.0.0.1"})
	s := &State{Config: c, Files: &files.AtomicWriter{Root: t.TempDir()}, Report: output.NewReporter(&bytes.Buffer{}, false)}
	err := runBootstrapAdmin(context.Background(), s)
	if err == nil || !strings.Contains(err.Error(), "run `kubeboot init phase kubeconfig` first") {
		t.Errorf("want a hint to run the kubeconfig phase, got %v", err)
	}
}
