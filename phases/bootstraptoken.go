package phases

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/kubeboot/kubeboot/bootstraptoken"
	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/pki"
	"github.com/kubeboot/kubeboot/templates"
)

// BootstrapToken grants what node join needs (kubeadm's ClusterRoleBindings
// for bootstrap tokens and nodes, and kubeadm:get-nodes) and makes sure a
// bootstrap token exists for joining nodes: the one an earlier init
// created, while it stays valid long enough, or a new one valid for
// bootstrapToken.ttl. The join command, which holds the token, goes to the
// run's result only.
var BootstrapToken = Phase{
	Name:     "bootstrap-token",
	Short:    "Grant bootstrap tokens and nodes their roles, and create the token nodes join with (or keep init's)",
	LiveOnly: true,
	Run:      runBootstrapToken,
}

// Who created a token, in its CreatedByLabel.
const (
	CreatedByInit        = "init"
	CreatedByTokenCreate = "token-create"
)

// initTokenDescription describes the token init creates.
const initTokenDescription = "kubeboot init: the token nodes join with"

// maxReuseMargin is how long, at most, init's token must still be valid to
// be reused: long enough for the join printed with it.
const maxReuseMargin = time.Hour

func runBootstrapToken(ctx context.Context, s *State) error {
	hash, err := CAHash(s)
	if err != nil {
		return err
	}
	client, err := apiClient(s)
	if err != nil {
		return err
	}
	if err := applyObjects(ctx, s, client, templates.BootstrapTokenRBAC()); err != nil {
		return err
	}
	ttl := s.Config.BootstrapToken.TTL.Duration
	now := time.Now()
	info, found, err := findInitToken(ctx, client, now, ttl)
	if err != nil {
		return err
	}
	verb := "unchanged: reusing init's token"
	if !found {
		if info, err = CreateToken(ctx, client, ttl, initTokenDescription, CreatedByInit, now); err != nil {
			return err
		}
		verb = "created: token"
	}
	s.Report.Infof("Secret %s/%s %s %s, valid until %s", bootstraptoken.Namespace, bootstraptoken.SecretName(info.Token.ID),
		verb, info.Token.ID, info.Expires.Format(time.RFC3339))
	s.JoinCommand = JoinCommand(s.Config, info.Token, hash)
	s.Report.Infof("the join command, which holds the token, comes last: on stdout, or as the JSON result's joinCommand")
	return nil
}

// findInitToken finds the token an earlier init created that is still
// valid for the shorter of half of ttl and maxReuseMargin, and was made
// with at most ttl (a shorter ttl in the configuration takes effect). Of
// several, the one valid longest wins.
func findInitToken(ctx context.Context, client kubernetes.Interface, now time.Time, ttl time.Duration) (bootstraptoken.Info, bool, error) {
	tokens, _, err := ListTokens(ctx, client, CreatedByInit)
	if err != nil {
		return bootstraptoken.Info{}, false, err
	}
	margin := min(ttl/2, maxReuseMargin)
	var best bootstraptoken.Info
	for _, t := range tokens {
		if t.JoinsUntil(now.Add(margin)) && !t.Expires.IsZero() && !t.Expires.After(now.Add(ttl)) && t.Expires.After(best.Expires) {
			best = t
		}
	}
	return best, best.Token.ID != "", nil
}

// CreateToken creates a new token for joining nodes, valid for ttl from
// now. Its Secret is created rather than applied: a token never changes,
// and an ID that is taken already (a one in 2 billion chance) must not
// replace another token, so a new ID is drawn instead.
func CreateToken(ctx context.Context, client kubernetes.Interface, ttl time.Duration, description, createdBy string, now time.Time) (bootstraptoken.Info, error) {
	for range 3 {
		token, err := bootstraptoken.Generate(rand.Reader)
		if err != nil {
			return bootstraptoken.Info{}, err
		}
		info := bootstraptoken.ForNodes(token, now.Add(ttl), description, createdBy)
		secret := bootstraptoken.Secret(info)
		_, err = client.CoreV1().Secrets(secret.Namespace).Create(ctx, secret, metav1.CreateOptions{FieldManager: FieldManager})
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			return bootstraptoken.Info{}, fmt.Errorf("create Secret %q: %w", secret.Namespace+"/"+secret.Name, err)
		}
		return info, nil
	}
	return bootstraptoken.Info{}, fmt.Errorf("create bootstrap token: three new token IDs were all taken")
}

// ListTokens lists the bootstrap tokens, soonest to expire first, and the
// problems of the token Secrets it cannot read. A non-empty createdBy keeps
// only the tokens with that CreatedByLabel.
func ListTokens(ctx context.Context, client kubernetes.Interface, createdBy string) ([]bootstraptoken.Info, []error, error) {
	opts := metav1.ListOptions{}
	if createdBy != "" {
		opts.LabelSelector = labels.Set{bootstraptoken.CreatedByLabel: createdBy}.String()
	}
	list, err := client.CoreV1().Secrets(bootstraptoken.Namespace).List(ctx, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("list Secrets in %q: %w", bootstraptoken.Namespace, err)
	}
	var tokens []bootstraptoken.Info
	var problems []error
	for i := range list.Items {
		secret := &list.Items[i]
		if secret.Type != bootstraptoken.SecretType {
			continue
		}
		info, err := bootstraptoken.FromSecret(secret)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		if createdBy == "" || info.CreatedBy == createdBy {
			tokens = append(tokens, info)
		}
	}
	sort.SliceStable(tokens, func(i, j int) bool {
		a, b := tokens[i].Expires, tokens[j].Expires
		return !a.IsZero() && (b.IsZero() || a.Before(b))
	})
	return tokens, problems, nil
}

// DeleteToken deletes the token with this ID.
func DeleteToken(ctx context.Context, client kubernetes.Interface, id string) error {
	name := bootstraptoken.SecretName(id)
	err := client.CoreV1().Secrets(bootstraptoken.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("delete bootstrap token %q: no Secret %s/%s", id, bootstraptoken.Namespace, name)
	}
	if err != nil {
		return fmt.Errorf("delete Secret %q: %w", bootstraptoken.Namespace+"/"+name, err)
	}
	return nil
}

// CAHash reads the pin of the cluster CA (see pki.CACertHash) from ca.crt.
func CAHash(s *State) (string, error) {
	path := s.Config.CertPath(config.CertCA)
	ca, err := s.Files.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read %q (run `kubeboot init phase certs` first): %w", path, err)
	}
	hash, err := pki.CACertHash(ca)
	if err != nil {
		return "", fmt.Errorf("read %q: %w", path, err)
	}
	return hash, nil
}

// JoinCommand is the command that joins a node with token: the cluster's
// endpoint, the token, and the pin of the cluster CA that the node checks
// the CA it discovers against.
func JoinCommand(c *config.ClusterConfiguration, token bootstraptoken.Token, caHash string) string {
	return fmt.Sprintf("kubeboot join %s --token %s --discovery-token-ca-cert-hash %s", JoinEndpoint(c), token.Value(), caHash)
}

// JoinEndpoint is the host:port joining nodes reach the cluster at: the
// controlPlaneEndpoint, else this node's API server.
func JoinEndpoint(c *config.ClusterConfiguration) string {
	u, err := url.Parse(c.ControlPlaneURL())
	if err != nil {
		return c.ControlPlaneURL()
	}
	return u.Host
}
