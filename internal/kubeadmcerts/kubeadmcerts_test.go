package kubeadmcerts

import (
	"bytes"
	"crypto/rand"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
)

// TestSealOpen: each file is sealed under its kubeadm name with a nonce
// of its own, opens again with the key, and a wrong key is refused.
func TestSealOpen(t *testing.T) {
	hexKey, err := Generate(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ParseKey(hexKey)
	if err != nil || len(key) != KeySize {
		t.Fatalf("ParseKey(Generate()): %d bytes, %v", len(key), err)
	}
	files := map[string][]byte{"ca.crt": []byte("cert"), "etcd/ca.key": []byte("key"), "sa.pub": []byte("same"), "sa.key": []byte("same")}
	data, err := Seal(key, files, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := data["etcd-ca.key"]; !ok || len(data) != len(files) {
		t.Fatalf("sealed names %v, want etcd/ca.key as etcd-ca.key", slices.Collect(maps.Keys(data)))
	}
	if bytes.Equal(data["sa.pub"], data["sa.key"]) || bytes.Contains(data["ca.crt"], []byte("cert")) {
		t.Error("two equal files sealed alike, or a file in clear: the nonces are not fresh")
	}
	opened, err := Open(key, data, append(slices.Collect(maps.Keys(files)), "front-proxy-ca.crt"))
	if err != nil || !maps.EqualFunc(opened, files, bytes.Equal) {
		t.Fatalf("Open: %v, %v; want %v (a name the data lacks left out)", opened, err, files)
	}
	other, _ := Generate(rand.Reader)
	otherKey, _ := ParseKey(other)
	if _, err := Open(otherKey, data, []string{"ca.crt"}); err == nil || !strings.Contains(err.Error(), "not the one the secrets were uploaded with") {
		t.Errorf("Open with another key: %v", err)
	}
	data["ca.crt"] = data["ca.crt"][:5]
	if _, err := Open(key, data, []string{"ca.crt"}); err == nil {
		t.Error("a truncated entry opened")
	}
}

// TestParseKeyNeverQuotesTheKey: a malformed key is refused without the
// error showing it.
func TestParseKeyNeverQuotesTheKey(t *testing.T) {
	for _, bad := range []string{"", "abc", strings.Repeat("z", 64), strings.Repeat("ab", 31), strings.Repeat("ab", 33)} {
		_, err := ParseKey(bad)
		if err == nil || (bad != "" && strings.Contains(err.Error(), bad)) {
			t.Errorf("ParseKey(%q): %v", bad, err)
		}
	}
}

// TestObjects: the Secret belongs to its token's Secret (controller, so
// the garbage collector removes it with the token), and the Role lets the
// bootstrap tokens' group get that one Secret and nothing else.
func TestObjects(t *testing.T) {
	token := bootstraptoken.Token{ID: "abcdef", Secret: "0123456789abcdef"}
	info := OwnerToken(token, metav1.Now().Add(TokenTTL), "upload-certs")
	if len(info.Usages) != 0 || len(info.Groups) != 0 || info.Description != TokenDescription {
		t.Errorf("owner token %+v: it must neither authenticate nor sign", info)
	}
	owner := bootstraptoken.Secret(info)
	owner.UID = types.UID("uid-1")
	s := Secret(map[string][]byte{"ca.crt": {1}}, owner)
	ref := s.OwnerReferences
	if s.Name != SecretName || s.Namespace != "kube-system" || s.Type != corev1.SecretTypeOpaque || len(ref) != 1 ||
		ref[0].Name != "bootstrap-token-abcdef" || ref[0].UID != "uid-1" || ref[0].Kind != "Secret" || ref[0].Controller == nil || !*ref[0].Controller {
		t.Errorf("Secret %+v", s.ObjectMeta)
	}
	role, binding := RBAC()
	rule := role.Rules[0]
	if len(role.Rules) != 1 || strings.Join(rule.Verbs, ",") != "get" || strings.Join(rule.ResourceNames, ",") != SecretName || strings.Join(rule.Resources, ",") != "secrets" {
		t.Errorf("Role rules %+v", role.Rules)
	}
	if binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 || binding.Subjects[0].Name != bootstraptoken.NodeGroup {
		t.Errorf("RoleBinding %+v", binding)
	}
}
