package app

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/tokens"
)

// The token commands change objects in the cluster, not the node's files,
// so they take no node lock; token generate only prints a new token. They
// talk to the API server with the node's admin.conf, or with --kubeconfig
// from any machine.
// A token's secret is printed once, in the result of token create, and
// nowhere else: no progress line, no JSON event, no list.

// tokenOptions are the flags every token subcommand shares.
type tokenOptions struct {
	deps                   deps
	configPath, kubeconfig string
}

// open connects to the cluster: with --kubeconfig, from any machine; else
// as the node's configuration says, with its admin.conf.
func (o *tokenOptions) open(ctx context.Context, report *output.Reporter) (tokens.Cluster, error) {
	if o.kubeconfig != "" {
		if err := configOrKubeconfig(o.configPath, o.kubeconfig); err != nil {
			return tokens.Cluster{}, err
		}
		client, err := o.deps.kubeconfigClient(o.kubeconfig)
		if err != nil {
			return tokens.Cluster{}, err
		}
		return tokens.ConnectClient(ctx, client, report)
	}
	r, err := o.deps.nodeSpec(o.configPath, "")
	if err != nil {
		return tokens.Cluster{}, err
	}
	s, err := o.deps.node(r, report, io.Discard)
	if err != nil {
		return tokens.Cluster{}, err
	}
	return tokens.Connect(s, o.deps.adminClient)
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
		"kubeboot token create --print-join-command --kubeconfig admin.conf",
	)
	addConfigFlag(cmd.PersistentFlags(), &shared.configPath)
	cmd.PersistentFlags().StringVar(&shared.kubeconfig, "kubeconfig", "", "an administrator's kubeconfig, to manage the tokens from any machine instead of a control-plane node (the join command then names the endpoint and CA of the cluster's kube-public/cluster-info)")

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
			ids, err := tokens.IDs(args)
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

func (o *tokenCreateOptions) run(ctx context.Context, report *output.Reporter, stdout io.Writer) (any, error) {
	cluster, err := o.open(ctx, report)
	if err != nil {
		return nil, err
	}
	opts := tokens.CreateOptions{TTL: o.ttl, Description: o.description}
	if o.discoveryFile == stdoutTarget {
		opts.DiscoveryContent = true
	} else {
		opts.DiscoveryFile = o.discoveryFile
	}
	res, err := tokens.Create(ctx, cluster, opts, time.Now())
	if err != nil {
		return nil, err
	}
	if opts.DiscoveryContent {
		// The file holds the token: it is what stdout carries, alone.
		report.Infof("the discovery file follows on stdout; the token in it expires at %s", res.Expires.Format(time.RFC3339))
		_, err = stdout.Write(res.Discovery)
		return nil, err
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
	return tokens.CheckDiscoveryFile(o.discoveryFile)
}

func (o *tokenListOptions) run(ctx context.Context, report *output.Reporter, stdout io.Writer) (any, error) {
	cluster, err := o.open(ctx, report)
	if err != nil {
		return nil, err
	}
	rows, err := tokens.List(ctx, cluster)
	if err != nil {
		return nil, err
	}
	if report.JSON() {
		return map[string][]tokens.Listed{"tokens": rows}, nil
	}
	return nil, printTokens(stdout, rows, time.Now())
}

func printTokens(w io.Writer, rows []tokens.Listed, now time.Time) error {
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

func (o *tokenDeleteOptions) run(ctx context.Context, report *output.Reporter, ids []string) (any, error) {
	cluster, err := o.open(ctx, report)
	if err != nil {
		return nil, err
	}
	deleted, err := tokens.Delete(ctx, cluster, ids)
	return map[string][]string{"deleted": deleted}, err
}
