package app

import (
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/internal/config"
)

// version is kubeboot's release, stamped by the Makefile with -ldflags -X:
// `git describe --tags --always --dirty`, so a tag (v0.4.0), a tag and the
// commits past it (v0.4.0-3-g1a2b3c4), or in a tree without a tag the
// commit alone (1a2b3c4), each perhaps with -dirty.
var version = ""

// taggedVersion is a version git describe derived from a release tag.
var taggedVersion = regexp.MustCompile(`^v?[0-9]+\.[0-9]+\.[0-9]+`)

// untaggedVersion is what git describe --always gives without a tag: the
// abbreviated commit, perhaps -dirty.
var untaggedVersion = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^([0-9a-f]{7,40})(-dirty)?$`)
})

// versionInfo is what `kubeboot version` prints.
type versionInfo struct {
	// Version is the stamped version, "dev" when none was stamped.
	Version string `json:"version"`
	// Tagged says whether Version comes from a release tag; an untagged
	// build is no release.
	Tagged bool `json:"tagged"`
	// Commit is the commit an untagged build was made from, when known.
	Commit            string `json:"commit,omitempty"`
	GoVersion         string `json:"goVersion"`
	Platform          string `json:"platform"`
	KubernetesDefault string `json:"kubernetesDefault"`
	KubernetesMin     string `json:"kubernetesMin"`
	KubernetesMax     string `json:"kubernetesMax"`
}

func currentVersion() versionInfo {
	v := versionInfo{
		GoVersion:         runtime.Version(),
		Platform:          runtime.GOOS + "/" + runtime.GOARCH,
		KubernetesDefault: config.DefaultKubernetesVersion,
		KubernetesMin:     fmt.Sprintf("v1.%d", config.MinKubernetesMinor),
		KubernetesMax:     fmt.Sprintf("v1.%d", config.MaxKubernetesMinor),
	}
	v.setVersion(version, buildRevision())
	return v
}

// setVersion sets the version from stamped (the Makefile's git describe;
// empty for a plain go build), and says whether it is a release's tag;
// revision is the commit the Go toolchain recorded, if any.
func (v *versionInfo) setVersion(stamped, revision string) {
	v.Version, v.Tagged, v.Commit = stamped, false, ""
	switch {
	case stamped == "" || stamped == "dev":
		// A "dev" version keeps the default csrApprover.image's tag as it was.
		v.Version = "dev"
		v.Commit = revision
	case taggedVersion.MatchString(stamped):
		v.Tagged = true
	default:
		if m := untaggedVersion().FindStringSubmatch(stamped); m != nil {
			v.Commit = m[1]
		} else {
			v.Commit = revision
		}
	}
}

// buildRevision is the commit the Go toolchain stamped (go build in a
// git tree without -buildvcs=false), abbreviated, or "".
func buildRevision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return s.Value[:12]
		}
	}
	return ""
}

// String is the version as the text output names it: the tag, or a plain
// statement that the build is untagged and from which commit.
func (v versionInfo) String() string {
	switch {
	case taggedVersion.MatchString(v.Version):
		return v.Version
	case v.Version == "dev" && v.Commit == "":
		return "untagged build (commit unknown)"
	case v.Version == "dev":
		return "untagged build " + v.Commit
	default:
		return "untagged build " + v.Version
	}
}

func newVersionCommand(d deps, stdout io.Writer) *cobra.Command {
	var output outputFormat
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print kubeboot's version and the Kubernetes versions it supports",
		Example: examples(
			"kubeboot version",
			"kubeboot version -o json",
		),
		Args: usageArgs(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			v := d.version
			if output == "json" {
				return json.NewEncoder(stdout).Encode(v)
			}
			_, err := fmt.Fprintf(stdout, "kubeboot %s (%s, %s)\nKubernetes %s to %s, default %s\n",
				v, v.GoVersion, v.Platform, v.KubernetesMin, v.KubernetesMax, v.KubernetesDefault)
			return err
		},
	}
	addOutputFlag(cmd.Flags(), &output)
	return cmd
}
