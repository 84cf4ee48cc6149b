package app

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/internal/config"
)

// version is kubeboot's release, stamped by the Makefile with -ldflags -X.
var version = ""

// versionInfo is what `kubeboot version` prints.
type versionInfo struct {
	Version           string `json:"version"`
	GoVersion         string `json:"goVersion"`
	Platform          string `json:"platform"`
	KubernetesDefault string `json:"kubernetesDefault"`
	KubernetesMin     string `json:"kubernetesMin"`
	KubernetesMax     string `json:"kubernetesMax"`
}

func currentVersion() versionInfo {
	v := version
	if v == "" {
		v = "(devel)"
		if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
			v = info.Main.Version
		}
	}
	return versionInfo{
		Version:           v,
		GoVersion:         runtime.Version(),
		Platform:          runtime.GOOS + "/" + runtime.GOARCH,
		KubernetesDefault: config.DefaultKubernetesVersion,
		KubernetesMin:     fmt.Sprintf("v1.%d", config.MinKubernetesMinor),
		KubernetesMax:     fmt.Sprintf("v1.%d", config.MaxKubernetesMinor),
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
				v.Version, v.GoVersion, v.Platform, v.KubernetesMin, v.KubernetesMax, v.KubernetesDefault)
			return err
		},
	}
	addOutputFlag(cmd.Flags(), &output)
	return cmd
}
