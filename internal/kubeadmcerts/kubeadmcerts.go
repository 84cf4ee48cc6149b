// Package kubeadmcerts is the kubeadm-certs Secret, in kubeadm's format:
// the cluster secrets a joining control-plane node needs (the CAs with
// their keys, the service-account key pair), each encrypted with a
// certificate key (AES-256-GCM, the nonce before the ciphertext) under its
// file name with "/" made "-". The Secret belongs to a bootstrap token
// that expires after two hours, so the cluster's garbage collector removes
// it then; a Role lets the bootstrap tokens' group read it, and nothing
// else. It is pure: it builds and reads the objects.
package kubeadmcerts

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
)

const (
	// SecretName is the Secret's name, in kube-system.
	SecretName = "kubeadm-certs"
	// RoleName names the Role and RoleBinding that let joining nodes read it.
	RoleName = "kubeadm:kubeadm-certs"
	// TokenTTL is how long the Secret lives: the life of its owner token.
	TokenTTL = 2 * time.Hour
	// TokenDescription is the owner token's description, as kubeadm's.
	TokenDescription = "Proxy for managing TTL for the kubeadm-certs secret"
	// KeySize is the certificate key's size in bytes: an AES-256 key.
	KeySize = 32
)

// Generate returns a new certificate key, hex-encoded, from rand.
func Generate(rand io.Reader) (string, error) {
	key := make([]byte, KeySize)
	if _, err := io.ReadFull(rand, key); err != nil {
		return "", fmt.Errorf("generate a certificate key: %w", err)
	}
	return hex.EncodeToString(key), nil
}

// ParseKey decodes a hex-encoded certificate key; its error never quotes
// the key.
func ParseKey(s string) ([]byte, error) {
	key, err := hex.DecodeString(s)
	if err != nil || len(key) != KeySize {
		return nil, fmt.Errorf("a certificate key is %d hex digits (%d bytes), as `kubeboot init --upload-certs` prints it or `kubeboot certs certificate-key` makes it", 2*KeySize, KeySize)
	}
	return key, nil
}

// DataName is the Secret's key of a file of the cluster secrets.
func DataName(file string) string { return strings.ReplaceAll(file, "/", "-") }

// Seal encrypts each file with key, by DataName, each with its own nonce
// from rand.
func Seal(key []byte, files map[string][]byte, rand io.Reader) (map[string][]byte, error) {
	gcm, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	data := map[string][]byte{}
	for name, plain := range files {
		nonce := make([]byte, gcm.NonceSize())
		if _, err := io.ReadFull(rand, nonce); err != nil {
			return nil, fmt.Errorf("encrypt %s: %w", name, err)
		}
		data[DataName(name)] = gcm.Seal(nonce, nonce, plain, nil)
	}
	return data, nil
}

// Open decrypts the files named in names from the Secret's data; a file
// the data lacks is left out, for the caller to judge. A wrong key fails
// on the first file, saying so.
func Open(key []byte, data map[string][]byte, names []string) (map[string][]byte, error) {
	gcm, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, name := range names {
		sealed, ok := data[DataName(name)]
		if !ok {
			continue
		}
		if len(sealed) < gcm.NonceSize() {
			return nil, fmt.Errorf("decrypt %s of Secret %s: too short", DataName(name), SecretName)
		}
		nonce, ciphertext := sealed[:gcm.NonceSize()], sealed[gcm.NonceSize():]
		plain, err := gcm.Open(nil, nonce, ciphertext, nil)
		if err != nil {
			return nil, errors.New("decrypt " + DataName(name) + " of Secret " + SecretName + ": the certificate key is not the one the secrets were uploaded with (upload them again with `kubeboot init phase upload-certs`)")
		}
		files[name] = plain
	}
	return files, nil
}

func newGCM(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("certificate key: %w", err)
	}
	return cipher.NewGCM(block)
}

// OwnerToken is the Info of the token whose Secret owns kubeadm-certs: it
// neither authenticates nor signs, and expires at expires.
func OwnerToken(t bootstraptoken.Token, expires time.Time, createdBy string) bootstraptoken.Info {
	return bootstraptoken.Info{Token: t, Expires: expires.UTC().Truncate(time.Second), Description: TokenDescription, CreatedBy: createdBy}
}

// Secret builds kubeadm-certs with the sealed data, owned by the token
// Secret owner (which must carry its UID): when the token expires and the
// token cleaner deletes it, the garbage collector deletes this too.
func Secret(data map[string][]byte, owner *corev1.Secret) *corev1.Secret {
	yes := true
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      SecretName,
			Namespace: metav1.NamespaceSystem,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Secret", Name: owner.Name, UID: owner.UID,
				Controller: &yes, BlockOwnerDeletion: &yes,
			}},
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
}

// RBAC lets the bootstrap tokens' group get kubeadm-certs, and nothing else.
func RBAC() (*rbacv1.Role, *rbacv1.RoleBinding) {
	meta := metav1.ObjectMeta{Name: RoleName, Namespace: metav1.NamespaceSystem}
	role := &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
		ObjectMeta: meta,
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{SecretName}, Verbs: []string{"get"}}},
	}
	binding := &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: meta,
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: RoleName},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, Name: bootstraptoken.NodeGroup}},
	}
	return role, binding
}
