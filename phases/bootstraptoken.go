package phases

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/pki"
	"github.com/kubeboot/kubeboot/templates"
)

// BootstrapToken grants what node join needs (kubeadm's ClusterRoleBindings
// for bootstrap tokens and nodes, and kubeadm:get-nodes) and makes sure the
// configuration's bootstrap tokens exist (config's InitBootstrapTokens): a
// token given there is applied, keeping the expiry of its Secret while
// that lies within its ttl; the one left to generate is the one an earlier
// init generated, while it stays valid long enough, or a new one. The join
// command holds the first given token that can join a node, else the
// generated one; it goes to the run's result only.
var BootstrapToken = workflow.Phase[*Node]{
	Name:     "bootstrap-token",
	Short:    "Grant bootstrap tokens and nodes their roles, and create the configuration's tokens (or keep init's)",
	LiveOnly: true,
	Run:      runBootstrapToken,
}

// Who created a token, in its CreatedByLabel.
const (
	// CreatedByInit marks the token init generated.
	CreatedByInit = "init"
	// CreatedByInitConfig marks a token init created as given in the
	// configuration's bootstrapTokens.
	CreatedByInitConfig = "init-config"
	// CreatedByTokenCreate marks a token of `kubeboot token create`.
	CreatedByTokenCreate = "token-create"
	// CreatedByConfigFleet marks a worker's node-bound token that
	// `kubeboot config fleet --kubeconfig` made in the running cluster.
	CreatedByConfigFleet = "config-fleet"
)

// initTokenDescription describes the token init generates, unless the
// configuration describes it.
const initTokenDescription = "kubeboot init: the token nodes join with"

// maxReuseMargin is how long, at most, init's token must still be valid to
// be reused: long enough for the join printed with it.
const maxReuseMargin = time.Hour

func runBootstrapToken(ctx context.Context, s *Node) error {
	hash, err := CAHash(s)
	if err != nil {
		return err
	}
	client, err := APIClient(s)
	if err != nil {
		return err
	}
	if err := applyObjects(ctx, s, client, templates.BootstrapTokenRBAC()); err != nil {
		return err
	}
	now := time.Now()
	var join *bootstraptoken.Info
	joinGiven := false
	for i, spec := range s.Config.InitBootstrapTokens() {
		info, err := ensureToken(ctx, s, client, spec, now)
		if err != nil {
			if len(s.Config.BootstrapTokens) > 0 {
				return fmt.Errorf("bootstrapTokens[%d]: %w", i, err)
			}
			return err
		}
		given := spec.Token != ""
		if info.JoinsUntil(now) && (join == nil || given && !joinGiven) {
			join, joinGiven = &info, given
		}
	}
	if join == nil {
		s.Report.Warnf("none of bootstrapTokens can join a node (that needs the usages authentication and signing and the group %s): no join command; make a token with `kubeboot token create`", bootstraptoken.NodeGroup)
		return nil
	}
	s.JoinCommand = JoinCommand(JoinEndpoint(s.Config), join.Token, hash)
	s.Report.Infof("the join command, with token %s, comes last: on stdout, or as the JSON result's joinCommand", join.Token.ID)
	return nil
}

// ensureToken makes sure the token of spec exists: applied when given,
// else init's generated token, reused or created. It reports what it did,
// never with the secret.
func ensureToken(ctx context.Context, s *Node, client kubernetes.Interface, spec config.BootstrapTokenSpec, now time.Time) (bootstraptoken.Info, error) {
	if spec.Token != "" {
		return applyGivenToken(ctx, s, client, spec, now)
	}
	info, found, err := findInitToken(ctx, client, now, spec)
	if err != nil {
		return bootstraptoken.Info{}, err
	}
	verb := "unchanged: reusing init's token"
	if !found {
		description := cmp.Or(spec.Description, initTokenDescription)
		info, err = createToken(ctx, client, func(t bootstraptoken.Token) bootstraptoken.Info {
			return tokenInfo(t, spec, description, CreatedByInit, now.Add(spec.TTL.Duration))
		})
		if err != nil {
			return bootstraptoken.Info{}, err
		}
		verb = "created: token"
	}
	s.Report.Infof("Secret %s/%s %s %s, valid until %s", bootstraptoken.Namespace, bootstraptoken.SecretName(info.Token.ID),
		verb, info.Token.ID, info.Expires.Format(time.RFC3339))
	return info, nil
}

// tokenInfo is the Info of a token made as spec says.
func tokenInfo(t bootstraptoken.Token, spec config.BootstrapTokenSpec, description, createdBy string, expires time.Time) bootstraptoken.Info {
	return bootstraptoken.Info{
		Token:       t,
		Expires:     expires.UTC().Truncate(time.Second),
		Usages:      slices.Sorted(slices.Values(spec.Usages)),
		Groups:      spec.Groups,
		Description: description,
		CreatedBy:   createdBy,
	}
}

// applyGivenToken applies the Secret of a token given in the
// configuration (ApplyToken) and reports what it did.
func applyGivenToken(ctx context.Context, s *Node, client kubernetes.Interface, spec config.BootstrapTokenSpec, now time.Time) (bootstraptoken.Info, error) {
	info, verb, err := ApplyToken(ctx, client, spec, CreatedByInitConfig, now)
	if err != nil {
		return bootstraptoken.Info{}, err
	}
	s.Report.Infof("Secret %s/%s %s: token %s of the configuration, valid until %s", bootstraptoken.Namespace, bootstraptoken.SecretName(info.Token.ID), verb, info.Token.ID, info.Expires.Format(time.RFC3339))
	return info, nil
}

// ApplyToken applies the Secret of a token given in full (spec.Token,
// its ttl, usages and groups defaulted as a loaded configuration's are),
// by server-side apply, labelled createdBy, and returns it and the verb
// of apply ("created", "updated", "unchanged"). A Secret of the token that
// exists keeps its expiry while that has not passed and lies within the
// ttl, so a re-run changes nothing, and one that has expired is made valid
// for the ttl again; a Secret of its ID that holds another token, or no
// token, is refused rather than replaced.
func ApplyToken(ctx context.Context, client kubernetes.Interface, spec config.BootstrapTokenSpec, createdBy string, now time.Time) (bootstraptoken.Info, string, error) {
	token, err := bootstraptoken.Parse(spec.Token)
	if err != nil {
		return bootstraptoken.Info{}, "", err
	}
	secrets := client.CoreV1().Secrets(bootstraptoken.Namespace)
	name := bootstraptoken.SecretName(token.ID)
	expires := now.Add(spec.TTL.Duration)
	have, err := secrets.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return bootstraptoken.Info{}, "", fmt.Errorf("get Secret %q: %w", bootstraptoken.Namespace+"/"+name, err)
	default:
		old, err := bootstraptoken.FromSecret(have)
		if err != nil {
			return bootstraptoken.Info{}, "", fmt.Errorf("the token's Secret exists and is not a token kubeboot can read (%w): delete it (`kubeboot token delete %s`) or give another token (`kubeboot token generate`)", err, token.ID)
		}
		if old.Token != token {
			return bootstraptoken.Info{}, "", fmt.Errorf("the Secret %s/%s holds another token with the ID %s: delete it (`kubeboot token delete %s`) or give another token (`kubeboot token generate`)",
				bootstraptoken.Namespace, name, token.ID, token.ID)
		}
		if old.Expires.After(now) && !old.Expires.After(expires) {
			expires = old.Expires
		}
	}
	info := tokenInfo(token, spec, spec.Description, createdBy, expires)
	verb, err := apply(ctx, secrets, bootstraptoken.Secret(info), nil)
	if err != nil {
		return bootstraptoken.Info{}, "", err
	}
	return info, verb, nil
}

// findInitToken finds the token an earlier init generated as spec says
// (the same usages and groups) that is still valid for the shorter of half
// of its ttl and maxReuseMargin, and was made with at most its ttl (a
// shorter ttl in the configuration takes effect). Of several, the one
// valid longest wins.
func findInitToken(ctx context.Context, client kubernetes.Interface, now time.Time, spec config.BootstrapTokenSpec) (bootstraptoken.Info, bool, error) {
	tokens, _, err := ListTokens(ctx, client, CreatedByInit)
	if err != nil {
		return bootstraptoken.Info{}, false, err
	}
	ttl := spec.TTL.Duration
	usages, groups := slices.Sorted(slices.Values(spec.Usages)), slices.Sorted(slices.Values(spec.Groups))
	margin := min(ttl/2, maxReuseMargin)
	var best bootstraptoken.Info
	for _, t := range tokens {
		if slices.Equal(t.Usages, usages) && slices.Equal(slices.Sorted(slices.Values(t.Groups)), groups) &&
			t.Expires.After(now.Add(margin)) && !t.Expires.After(now.Add(ttl)) && t.Expires.After(best.Expires) {
			best = t
		}
	}
	return best, best.Token.ID != "", nil
}

// CreateToken creates a new token for joining nodes, valid for ttl from
// now (see createToken).
func CreateToken(ctx context.Context, client kubernetes.Interface, ttl time.Duration, description, createdBy string, now time.Time) (bootstraptoken.Info, error) {
	return createToken(ctx, client, func(t bootstraptoken.Token) bootstraptoken.Info {
		return bootstraptoken.ForNodes(t, now.Add(ttl), description, createdBy)
	})
}

// createToken creates a token of a new ID and secret, as info makes it.
// Its Secret is created rather than applied: an ID that is taken already
// (a one in 2 billion chance) must not replace another token, so a new ID
// is drawn instead.
func createToken(ctx context.Context, client kubernetes.Interface, info func(bootstraptoken.Token) bootstraptoken.Info) (bootstraptoken.Info, error) {
	for range 3 {
		token, err := bootstraptoken.Generate(rand.Reader)
		if err != nil {
			return bootstraptoken.Info{}, err
		}
		made := info(token)
		secret := bootstraptoken.Secret(made)
		_, err = client.CoreV1().Secrets(secret.Namespace).Create(ctx, secret, metav1.CreateOptions{FieldManager: FieldManager})
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			return bootstraptoken.Info{}, fmt.Errorf("create Secret %q: %w", secret.Namespace+"/"+secret.Name, err)
		}
		return made, nil
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
func CAHash(s *Node) (string, error) {
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
func JoinCommand(endpoint string, token bootstraptoken.Token, caHash string) string {
	return fmt.Sprintf("kubeboot join %s --token %s --discovery-token-ca-cert-hash %s", endpoint, token.Value(), caHash)
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
