// Command kubeboot bootstraps a Kubernetes control plane on this node.
package main

import (
	"os"

	"github.com/kubeboot/kubeboot/cmd/kubeboot/app"
	"github.com/kubeboot/kubeboot/internal/startup"
)

func main() {
	startup.Done()
	os.Exit(app.Main())
}
