// Command kubeboot-release writes kubeboot's release (make release's
// dist/): the tarballs, .deb and .rpm packages, SBOM and SHA256SUMS of
// internal/release, for the version and time it is given; or, with
// --deb, only the .deb of a kubeboot binary built already, which the
// lab's machines install (make package).
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
	deb := flag.String("deb", "", "write only the .deb of --binary, for this machine's architecture, at this path")
	binary := flag.String("binary", "", "with --deb: the kubeboot binary to package")
	flag.Parse()
	var err error
	if *deb != "" {
		err = runDeb(*deb, *binary, *version)
	} else {
		err = run(*source, *out, *version)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// sourceDate is SOURCE_DATE_EPOCH, which make sets to the commit's time.
func sourceDate() (time.Time, error) {
	epoch, err := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH must be the commit's time in seconds: %w", err)
	}
	return time.Unix(epoch, 0), nil
}

// runDeb writes the .deb of binary at path, dated at SOURCE_DATE_EPOCH.
func runDeb(path, binary, version string) error {
	at, err := sourceDate()
	if err != nil {
		return err
	}
	if binary == "" {
		return fmt.Errorf("--deb needs --binary, the kubeboot binary to package")
	}
	if err := release.Deb(path, binary, release.Options{Version: version, Time: at, Commands: app.RootCommand()}); err != nil {
		return err
	}
	fmt.Println(path)
	return nil
}

// run builds the release dated at SOURCE_DATE_EPOCH.
func run(source, out, version string) error {
	at, err := sourceDate()
	if err != nil {
		return err
	}
	written, err := release.Build(context.Background(), release.Options{
		Source: source, Out: out, Version: version, Time: at, Commands: app.RootCommand(),
	})
	for _, name := range written {
		fmt.Println(out + "/" + name)
	}
	return err
}
