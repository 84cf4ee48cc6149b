package app

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/internal/bundle"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/files"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/phases"
)

// bundleMode keeps the encrypted bundle private too: it is only as safe as
// its key, but there is no reason to let others copy it.
const bundleMode = 0o600

// certsExportOptions are the flags of `kubeboot certs export`.
type certsExportOptions struct {
	*certsOptions
	out     string
	keyFile string
}

// newCertsExportCommand is `kubeboot certs export`: it seals the cluster
// secrets into an encrypted bundle for `kubeboot join --control-plane`.
func newCertsExportCommand(shared *certsOptions, stdout, stderr io.Writer) *cobra.Command {
	opts := &certsExportOptions{certsOptions: shared}
	cmd := &cobra.Command{
		Use:   "export --out FILE [--key-file K]",
		Short: "Write the CAs, service-account keys and encryption config to an encrypted bundle for joining control-plane nodes",
		Example: examples(
			"kubeboot certs export --config cluster.yaml --out /root/secrets.bundle > /root/bundle.key",
			"kubeboot certs export --config cluster.yaml --out secrets.bundle --key-file bundle.key",
		),
		Long: `Writes an AES-256-GCM encrypted bundle of the cluster CAs (cluster, front-proxy, etcd),
the service-account key pair and the encryption-at-rest config, for
` + "`kubeboot join --control-plane --certs-bundle FILE --key-file K`" + `.

Without --key-file a new random key is generated and printed to stdout, once,
as 64 hex digits; it is printed nowhere else and never written to disk.
Store it apart from the bundle. With --key-file the key is read from that file.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			return runCertsExport(opts, stdout, stderr)
		},
	}
	cmd.Flags().StringVar(&opts.out, "out", "", "the bundle file to write")
	cmd.Flags().StringVar(&opts.keyFile, "key-file", "", "read the bundle key (64 hex digits) from this file instead of generating and printing one")
	return cmd
}

func runCertsExport(opts *certsExportOptions, stdout, stderr io.Writer) error {
	out, keyFile := opts.out, opts.keyFile
	abs, err := exportTarget(out, keyFile, stdout)
	if err != nil {
		return err
	}
	report := output.NewReporter(stderr, false)
	report.SetPhase("certs export")
	r, err := opts.spec()
	if err != nil {
		return err
	}
	s, err := opts.deps.node(r, report, stdout)
	if err != nil {
		return err
	}
	var key []byte
	if keyFile != "" {
		if key, err = bundle.ReadKey(keyFile); err != nil {
			return err
		}
	} else if key, err = bundle.NewKey(); err != nil {
		return err
	}
	secrets, err := phases.ClusterSecrets(s)
	if err != nil {
		return err
	}
	data, err := bundle.Seal(key, secrets)
	if err != nil {
		return err
	}
	if err := writeBundle(abs, data, stdout); err != nil {
		return err
	}
	report.Infof("wrote %s (%d files)", bundleName(abs), len(secrets))
	if keyFile == "" {
		report.Infof("the bundle key follows on stdout; it is shown only this once")
		_, err = fmt.Fprintln(stdout, bundle.EncodeKey(key))
	}
	return err
}

// exportTarget checks --out before any work: "-" is stdout, which then
// carries the bundle alone, so the key must come from --key-file; any other
// path must be new or a regular file, and is returned absolute.
func exportTarget(out, keyFile string, stdout io.Writer) (string, error) {
	switch {
	case out == "":
		return "", &exit.UsageError{Msg: "certs export needs --out FILE (or --out - for stdout)"}
	case out == stdoutTarget && keyFile == "":
		return "", &exit.UsageError{Msg: "--out -: the bundle goes to stdout, where the new key would go too: pass the key with --key-file"}
	case out == stdoutTarget && isTerminal(stdout):
		return "", &exit.UsageError{Msg: "--out -: stdout is a terminal, and the bundle is binary: redirect stdout to a file, or name one with --out"}
	case out == stdoutTarget:
		return out, nil
	}
	abs, err := filepath.Abs(out)
	if err != nil {
		return "", &exit.UsageError{Msg: fmt.Sprintf("--out %s: %v", out, err)}
	}
	return abs, files.CheckTarget("--out", abs)
}

// writeBundle writes the sealed bundle to stdout for "-", else to the file
// at abs. The bundle is not a node file: it goes where --out says, even
// with --root. The directory is not kubeboot's: it is created private if it
// is missing, and left as it is if not.
func writeBundle(abs string, data []byte, stdout io.Writer) error {
	if abs == stdoutTarget {
		_, err := stdout.Write(data)
		return err
	}
	if err := (&files.AtomicWriter{}).MkdirMissing(filepath.Dir(abs), 0o700); err != nil {
		return err
	}
	return files.WriteTarget("--out", abs, data, bundleMode)
}

// bundleName is where the bundle went, for people.
func bundleName(abs string) string {
	if abs == stdoutTarget {
		return "the bundle to stdout"
	}
	return abs
}

// openBundle reads and decrypts the bundle at path with the key in
// keyFile, which go together.
func openBundle(path, keyFile string) (map[string][]byte, error) {
	if path == "" || keyFile == "" {
		return nil, &exit.UsageError{Msg: "--certs-bundle and --key-file go together"}
	}
	return bundle.OpenFile(path, keyFile)
}
