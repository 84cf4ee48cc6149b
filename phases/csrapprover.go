package phases

import (
	"context"

	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/pki"
	"github.com/kubeboot/kubeboot/templates"
)

// CSRApprover grants the CSR approver, which runs as the
// kubeboot-csr-approver static pod with csr-approver.conf, what it needs to
// approve the kubelet serving CSRs of nodes and nothing more (see
// templates.CSRApproverRBAC). Until this phase has run, the approver's
// reads are forbidden and it stays unready, which no phase waits for.
// With csrApprover.enabled false there is nothing to grant; grants of an
// earlier run stay, as the objects of the other live phases do.
var CSRApprover = workflow.Phase[*Node]{
	Name:     "csr-approver",
	Short:    "Grant the CSR approver the approving of kubelet serving certificates",
	LiveOnly: true,
	Run:      runCSRApprover,
}

func runCSRApprover(ctx context.Context, s *Node) error {
	if !s.Config.CSRApproverEnabled() {
		s.Report.Infof("csrApprover.enabled is false: nothing to grant")
		return nil
	}
	client, err := APIClient(s)
	if err != nil {
		return err
	}
	return applyObjects(ctx, s, client, templates.CSRApproverRBAC(pki.CSRApproverUser))
}
