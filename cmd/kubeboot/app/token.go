package app

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/files"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/pki"
)

// The token commands change objects in the cluster, not the node's files,
// so they take no node lock; token generate only prints a new token. They talk to the API server with admin.conf.
// A token's secret is printed once, in the result of token create, and
// nowhere else: no progress line, no JSON event, no list.

// tokenOptions are the flags every token subcommand shares.
type tokenOptions struct {
	deps       deps
	configPath string
}

// tokenRun is what a token command works with: the node's configuration
// and files, and an API client with admin.conf's identity.
type tokenRun struct {
	node   *phases.Node
	client kubernetes.Interface
}

// open loads the configuration and builds the client.
func (o *tokenOptions) open(report *output.Reporter) (tokenRun, error) {
	r, err := o.deps.nodeSpec(o.configPath, "")
	if err != nil {
		return tokenRun{}, err
	}
	s, err := o.deps.node(r, report, io.Discard)
	if err != nil {
		return tokenRun{}, err
	}
	path := s.Config.KubeconfigPath(config.KubeconfigAdmin)
	kubeconfig, err := s.Files.ReadFile(path)
	if err != nil {
		return tokenRun{}, fmt.Errorf("read %q (the token commands use admin.conf; pass the node's --config): %w", path, err)
	}
	client, err := o.deps.adminClient(kubeconfig)
	if err != nil {
		return tokenRun{}, fmt.Errorf("load %q: %w", path, err)
	}
	return tokenRun{node: s, client: client}, nil
}

// tokenCreateOptions are the flags of `kubeboot token create`.
type tokenCreateOptions struct {
	*tokenOptions
	ttl           time.Duration
	description   string
	printJoin     bool
	discoveryFile string
	output        outputFormat
}

// tokenListOptions are the flags of `kubeboot token list`.
type tokenListOptions struct {
	*tokenOptions
	output outputFormat
}

// tokenDeleteOptions are the flags of `kubeboot token delete`.
type tokenDeleteOptions struct {
	*tokenOptions
	output outputFormat
}

func newTokenCommand(d deps, stdout, stderr io.Writer) *cobra.Command {
	shared := &tokenOptions{deps: d}
	cmd := groupCommand("token", "Create, list and delete the bootstrap tokens nodes join with")
	cmd.Example = examples(
		"kubeboot token create --print-join-command --config cluster.yaml",
		"kubeboot token list --config cluster.yaml",
	)
	addConfigFlag(cmd.PersistentFlags(), &shared.configPath)

	createOpts := &tokenCreateOptions{tokenOptions: shared}
	create := &cobra.Command{
		Use:   "create",
		Short: "Create a bootstrap token and print it once (or the join command, or write a discovery file)",
		Example: examples(
			"kubeboot token create --print-join-command --config cluster.yaml",
			"kubeboot token create --ttl 2h --description rack4-workers --config cluster.yaml",
			"kubeboot token create --discovery-file discovery.conf --config cluster.yaml",
		),
		Args: argsTaking(cobra.NoArgs, "no arguments: it generates the token (to choose a token, list it in the configuration's bootstrapTokens, which init creates)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("ttl") && createOpts.ttl < config.MinBootstrapTokenTTL {
				return &exit.UsageError{Msg: fmt.Sprintf("--ttl %s: a token must be valid for at least %s (one that never expires cannot be created)", createOpts.ttl, config.MinBootstrapTokenTTL)}
			}
			if err := createOpts.checkDiscoveryFile(); err != nil {
				return err
			}
			return runTokenCommand(cmd.Context(), "token create", createOpts.output, stdout, stderr, func(ctx context.Context, report *output.Reporter) (any, error) {
				return createOpts.run(ctx, report, stdout)
			})
		},
	}
	create.Flags().DurationVar(&createOpts.ttl, "ttl", 0, "how long the token stays valid, at least 1m (default: the config's bootstrapToken.ttl, 24h)")
	create.Flags().StringVar(&createOpts.description, "description", "kubeboot token create", "what the token is for, stored with it")
	create.Flags().BoolVar(&createOpts.printJoin, "print-join-command", false, "print the whole join command (endpoint, token, CA pin) instead of the token alone")
	create.Flags().StringVar(&createOpts.discoveryFile, "discovery-file", "", "also write a kubeconfig for join --discovery-file (the CA, the endpoint and the token) to this `FILE`, mode 0600; - prints it to stdout instead of the token")
	addOutputFlag(create.Flags(), &createOpts.output)

	listOpts := &tokenListOptions{tokenOptions: shared}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the bootstrap tokens by ID, expiry, usages and groups (never their secrets)",
		Example: examples(
			"kubeboot token list --config cluster.yaml",
			"kubeboot token list --config cluster.yaml -o json",
		),
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runTokenCommand(cmd.Context(), "token list", listOpts.output, stdout, stderr, func(ctx context.Context, report *output.Reporter) (any, error) {
				return listOpts.run(ctx, report, stdout)
			})
		},
	}
	addOutputFlag(list.Flags(), &listOpts.output)

	deleteOpts := &tokenDeleteOptions{tokenOptions: shared}
	del := &cobra.Command{
		Use:     "delete ID...",
		Short:   "Delete bootstrap tokens, named by ID (or by the whole token)",
		Example: examples("kubeboot token delete abcdef --config cluster.yaml"),
		Args:    argsTaking(cobra.MinimumNArgs(1), "one or more token IDs or tokens"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := tokenIDs(args)
			if err != nil {
				return err
			}
			return runTokenCommand(cmd.Context(), "token delete", deleteOpts.output, stdout, stderr, func(ctx context.Context, report *output.Reporter) (any, error) {
				return deleteOpts.run(ctx, report, ids)
			})
		},
	}
	addOutputFlag(del.Flags(), &deleteOpts.output)
	cmd.AddCommand(newTokenGenerateCommand(stdout), create, list, del)
	return cmd
}

// newTokenGenerateCommand is `kubeboot token generate`, as kubeadm's: it
// prints a new token and touches neither the node nor the cluster, so that
// a configuration's bootstrapTokens can be written before the cluster
// exists.
func newTokenGenerateCommand(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:     "generate",
		Short:   "Print a new random bootstrap token, for the configuration's bootstrapTokens, without creating it",
		Example: examples("kubeboot token generate"),
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			token, err := bootstraptoken.Generate(rand.Reader)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(stdout, token.Value())
			return err
		},
	}
}

// runTokenCommand runs a token command until its context ends and, with
// -o json, prints its result: {"ok", "error"} and the fields of what do
// returns.
func runTokenCommand(ctx context.Context, name string, format outputFormat, stdout, stderr io.Writer, do func(context.Context, *output.Reporter) (any, error)) error {
	report := reporter(format, stdout, stderr)
	report.SetPhase(name)
	details, err := do(ctx, report)
	res := map[string]any{}
	if details != nil {
		// The details are plain structs and maps: they cannot fail to encode.
		data, _ := json.Marshal(details)
		_ = json.Unmarshal(data, &res)
	}
	res["ok"] = err == nil
	if err != nil {
		res["error"] = err.Error()
	}
	report.PrintResult(res)
	return err
}

// createdToken is what token create says, once.
type createdToken struct {
	ID            string    `json:"id"`
	Token         string    `json:"token"`
	Expires       time.Time `json:"expires"`
	JoinCommand   string    `json:"joinCommand"`
	DiscoveryFile string    `json:"discoveryFile,omitempty"`
}

func (o *tokenCreateOptions) run(ctx context.Context, report *output.Reporter, stdout io.Writer) (any, error) {
	run, err := o.open(report)
	if err != nil {
		return nil, err
	}
	s := run.node
	hash, err := phases.CAHash(s)
	if err != nil {
		return nil, err
	}
	ca, err := s.Files.ReadFile(s.Config.CertPath(config.CertCA))
	if err != nil {
		return nil, err
	}
	ttl := o.ttl
	if ttl == 0 {
		ttl = s.Config.BootstrapToken.TTL.Duration
	}
	info, err := phases.CreateToken(ctx, run.client, ttl, o.description, phases.CreatedByTokenCreate, time.Now())
	if err != nil {
		return nil, err
	}
	expires := info.Expires.Format(time.RFC3339)
	report.Infof("Secret %s/%s created: token %s, valid until %s", bootstraptoken.Namespace, bootstraptoken.SecretName(info.Token.ID), info.Token.ID, expires)
	res := createdToken{ID: info.Token.ID, Token: info.Token.Value(), Expires: info.Expires, JoinCommand: phases.JoinCommand(s.Config, info.Token, hash)}
	if o.discoveryFile == stdoutTarget {
		// The file holds the token: it is what stdout carries, alone.
		data, err := pki.DiscoveryKubeconfig(s.Config.ClusterName, s.Config.ControlPlaneURL(), ca, info.Token.Value())
		if err == nil {
			report.Infof("the discovery file follows on stdout; the token in it expires at %s", expires)
			_, err = stdout.Write(data)
		}
		return nil, err
	}
	if o.discoveryFile != "" {
		if res.DiscoveryFile, err = writeDiscoveryFile(s.Config, o.discoveryFile, ca, info.Token); err != nil {
			// A token nobody got is a credential for nothing: take it back.
			if delErr := phases.DeleteToken(context.WithoutCancel(ctx), run.client, info.Token.ID); delErr != nil {
				err = errors.Join(err, delErr)
			}
			return nil, err
		}
		report.Infof("wrote the discovery file %s (mode 0600); the token in it expires at %s", res.DiscoveryFile, expires)
	}
	if report.JSON() {
		return res, nil
	}
	line := res.Token
	if o.printJoin {
		line = res.JoinCommand
	}
	_, err = fmt.Fprintln(stdout, line)
	return nil, err
}

// checkDiscoveryFile refuses a --discovery-file that token create could
// not write, before it creates a token: "-" (stdout) with -o json, whose
// result is on stdout, or a path that exists and is not a regular file.
func (o *tokenCreateOptions) checkDiscoveryFile() error {
	switch o.discoveryFile {
	case "":
		return nil
	case stdoutTarget:
		if o.output.json() {
			return &exit.UsageError{Msg: "--discovery-file -: with -o json, stdout carries the result: name a file, or leave out -o json"}
		}
		return nil
	}
	abs, err := filepath.Abs(o.discoveryFile)
	if err != nil {
		return &exit.UsageError{Msg: "--discovery-file " + o.discoveryFile + ": " + err.Error()}
	}
	return files.CheckTarget("--discovery-file", abs)
}

// writeDiscoveryFile writes the kubeconfig of `join --discovery-file`
// atomically, mode 0600, and returns its absolute path. Its directory,
// which is not kubeboot's, is created private if it is missing.
func writeDiscoveryFile(c *config.ClusterConfiguration, path string, ca []byte, token bootstraptoken.Token) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", &exit.UsageError{Msg: "--discovery-file " + path + ": " + err.Error()}
	}
	data, err := pki.DiscoveryKubeconfig(c.ClusterName, c.ControlPlaneURL(), ca, token.Value())
	if err != nil {
		return "", err
	}
	if err := (&files.AtomicWriter{}).MkdirMissing(filepath.Dir(abs), 0o700); err != nil {
		return "", err
	}
	if err := files.WriteTarget("--discovery-file", abs, data, 0o600); err != nil {
		return "", err
	}
	return abs, nil
}

// listedToken is one token of token list: everything but its secret.
type listedToken struct {
	ID          string    `json:"id"`
	Expires     time.Time `json:"expires,omitzero"`
	Usages      []string  `json:"usages"`
	Groups      []string  `json:"groups"`
	Description string    `json:"description,omitempty"`
	CreatedBy   string    `json:"createdBy,omitempty"`
}

func (o *tokenListOptions) run(ctx context.Context, report *output.Reporter, stdout io.Writer) (any, error) {
	run, err := o.open(report)
	if err != nil {
		return nil, err
	}
	tokens, problems, err := phases.ListTokens(ctx, run.client, "")
	if err != nil {
		return nil, err
	}
	for _, p := range problems {
		report.Warnf("%v", p)
	}
	rows := make([]listedToken, len(tokens))
	for i, t := range tokens {
		rows[i] = listedToken{ID: t.Token.ID, Expires: t.Expires, Usages: nonNil(t.Usages), Groups: nonNil(t.Groups), Description: t.Description, CreatedBy: t.CreatedBy}
	}
	if report.JSON() {
		return map[string][]listedToken{"tokens": rows}, nil
	}
	return nil, printTokens(stdout, rows, time.Now())
}

func printTokens(w io.Writer, rows []listedToken, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "ID\tTTL\tEXPIRES\tUSAGES\tDESCRIPTION\tEXTRA GROUPS\tCREATED BY")
	for _, r := range rows {
		ttl, expires := "<forever>", "<never>"
		if !r.Expires.IsZero() {
			ttl, expires = "<expired>", r.Expires.UTC().Format(time.RFC3339)
			if left := r.Expires.Sub(now); left > 0 {
				ttl = left.Round(time.Minute).String()
			}
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, ttl, expires, orDash(strings.Join(r.Usages, ",")),
			orDash(r.Description), orDash(strings.Join(r.Groups, ",")), orDash(r.CreatedBy))
	}
	return tw.Flush()
}

// tokenIDs reads the arguments of token delete: token IDs or whole tokens.
// An argument that is neither is never quoted, since it may be a
// mistyped token.
func tokenIDs(args []string) ([]string, error) {
	ids := make([]string, len(args))
	for i, arg := range args {
		if bootstraptoken.ValidID(arg) {
			ids[i] = arg
			continue
		}
		t, err := bootstraptoken.Parse(arg)
		if err != nil {
			return nil, &exit.UsageError{Msg: fmt.Sprintf("argument %d is neither a token ID (6 characters of [a-z0-9]) nor a token", i+1)}
		}
		ids[i] = t.ID
	}
	return ids, nil
}

func (o *tokenDeleteOptions) run(ctx context.Context, report *output.Reporter, ids []string) (any, error) {
	run, err := o.open(report)
	if err != nil {
		return nil, err
	}
	deleted := []string{}
	for _, id := range ids {
		if err := phases.DeleteToken(ctx, run.client, id); err != nil {
			return map[string][]string{"deleted": deleted}, err
		}
		deleted = append(deleted, id)
		report.Infof("Secret %s/%s deleted: token %s", bootstraptoken.Namespace, bootstraptoken.SecretName(id), id)
	}
	return map[string][]string{"deleted": deleted}, nil
}
