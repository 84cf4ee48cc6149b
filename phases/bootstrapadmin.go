package phases

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/pki"
)

// The RBAC names bootstrap-admin manages. They are kubeadm's, so admin.conf
// and runbooks behave as on a kubeadm node.
const (
	clusterAdminsGroup   = pki.AdminsGroup
	kubeletClientUser    = pki.KubeletClientUser
	kubeletAPIAdminRole  = "system:kubelet-api-admin"
	kubeletClientBinding = "kubeboot:apiserver-kubelet-client"
)

// BootstrapAdmin grants admin.conf's group cluster-admin, so admin.conf works
// without system:masters, and lets the API server's kubelet client use the
// kubelet API. It runs as a visible phase with super-admin.conf.
var BootstrapAdmin = Phase{
	Name:     "bootstrap-admin",
	Short:    "Grant admin.conf and the API server's kubelet client their roles",
	LiveOnly: true,
	Run:      runBootstrapAdmin,
}

func runBootstrapAdmin(ctx context.Context, s *State) error {
	path := s.Config.KubeconfigPath(config.KubeconfigSuperAdmin)
	kubeconfig, err := s.Files.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %q (run `kubeboot init phase kubeconfig` first): %w", path, err)
	}
	api, err := newAPIClient(kubeconfig)
	if err != nil {
		return fmt.Errorf("load %q: %w", path, err)
	}
	if s.Config.ControlPlaneEndpoint != "" {
		// The wait phase saw this node's API server healthy; a load
		// balancer in front of it may not have noticed yet (the first
		// node of a cluster is its only backend), so talk to it directly.
		api.server = s.Config.LocalAPIEndpoint()
	}
	for _, b := range adminBindings() {
		verb, err := api.ensureClusterRoleBinding(ctx, b)
		if err != nil {
			return err
		}
		s.Report.Infof("ClusterRoleBinding %s %s", b.Name, verb)
	}
	return nil
}

func adminBindings() []*rbacv1.ClusterRoleBinding {
	binding := func(name, role, kind, subject string) *rbacv1.ClusterRoleBinding {
		return &rbacv1.ClusterRoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: kind, Name: subject}},
		}
	}
	return []*rbacv1.ClusterRoleBinding{
		binding(clusterAdminsGroup, "cluster-admin", rbacv1.GroupKind, clusterAdminsGroup),
		binding(kubeletClientBinding, kubeletAPIAdminRole, rbacv1.UserKind, kubeletClientUser),
	}
}

// apiClient speaks plain JSON over HTTPS to the API server, with the
// identity and CA of a kubeconfig.
type apiClient struct {
	server string
	http   *http.Client
}

func newAPIClient(kubeconfig []byte) (*apiClient, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return &apiClient{server: cfg.Host, http: client}, nil
}

const bindingsPath = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"

// ensureClusterRoleBinding creates want, or updates an existing binding of
// that name whose role or subjects differ. It says which it did.
func (a *apiClient) ensureClusterRoleBinding(ctx context.Context, want *rbacv1.ClusterRoleBinding) (string, error) {
	var have rbacv1.ClusterRoleBinding
	status, err := a.do(ctx, http.MethodGet, bindingsPath+"/"+want.Name, nil, &have)
	switch {
	case err != nil:
		return "", fmt.Errorf("get ClusterRoleBinding %q: %w", want.Name, err)
	case status == http.StatusNotFound:
		if _, err := a.do(ctx, http.MethodPost, bindingsPath, want, nil); err != nil {
			return "", fmt.Errorf("create ClusterRoleBinding %q: %w", want.Name, err)
		}
		return "created", nil
	case equality.Semantic.DeepEqual(have.RoleRef, want.RoleRef) && equality.Semantic.DeepEqual(have.Subjects, want.Subjects):
		return "unchanged", nil
	case have.RoleRef != want.RoleRef:
		// The role of a binding is immutable: replace the binding.
		if _, err := a.do(ctx, http.MethodDelete, bindingsPath+"/"+want.Name, nil, nil); err != nil {
			return "", fmt.Errorf("delete ClusterRoleBinding %q: %w", want.Name, err)
		}
		if _, err := a.do(ctx, http.MethodPost, bindingsPath, want, nil); err != nil {
			return "", fmt.Errorf("create ClusterRoleBinding %q: %w", want.Name, err)
		}
		return "replaced", nil
	}
	update := want.DeepCopy()
	update.ResourceVersion = have.ResourceVersion
	if _, err := a.do(ctx, http.MethodPut, bindingsPath+"/"+want.Name, update, nil); err != nil {
		return "", fmt.Errorf("update ClusterRoleBinding %q: %w", want.Name, err)
	}
	return "updated", nil
}

// do sends one request. A 404 on GET is returned as a status, not an error;
// any other non-2xx answer is an error carrying the server's message.
func (a *apiClient) do(ctx context.Context, method, path string, in, out any) (int, error) {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return 0, err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.server+path, body)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := a.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, err
	}
	if method == http.MethodGet && resp.StatusCode == http.StatusNotFound {
		return resp.StatusCode, nil
	}
	if resp.StatusCode/100 != 2 {
		var st metav1.Status
		if json.Unmarshal(data, &st) == nil && st.Message != "" {
			return resp.StatusCode, errors.New(st.Message)
		}
		return resp.StatusCode, fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	if out != nil {
		return resp.StatusCode, json.Unmarshal(data, out)
	}
	return resp.StatusCode, nil
}
