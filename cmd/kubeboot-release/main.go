// Command kubeboot-release writes kubeboot's release (make release's
// dist/): the tarballs, .deb and .rpm packages, SBOM and SHA256SUMS of
// internal/release, for the version and time it is given.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/kubeboot/kubeboot/cmd/kubeboot/app"
	"github.com/kubeboot/kubeboot/internal/release"
)

func main() {
	out := flag.String("out", "dist", "the directory to write the release into")
	version := flag.String("version", "", "the release's version (git describe --tags --always --dirty)")
	source := flag.String("source", ".", "the kubeboot module's directory")
	flag.Parse()
	if err := run(*source, *out, *version); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// run builds the release dated at SOURCE_DATE_EPOCH, which make release
// sets to the commit's time.
func run(source, out, version string) error {
	epoch, err := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64)
	if err != nil {
		return fmt.Errorf("SOURCE_DATE_EPOCH must be the commit's time in seconds: %w", err)
	}
	written, err := release.Build(context.Background(), release.Options{
		Source: source, Out: out, Version: version, Time: time.Unix(epoch, 0), Commands: app.RootCommand(),
	})
	for _, name := range written {
		fmt.Println(out + "/" + name)
	}
	return err
}
