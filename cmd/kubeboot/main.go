// Command kubeboot bootstraps a Kubernetes control plane on this node.
package main

import (
	"os"

	"github.com/kubeboot/kubeboot/cmd/kubeboot/app"
)

func main() {
	os.Exit(app.Main())
}
