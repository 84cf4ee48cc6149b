package tokens

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubeboot/kubeboot/internal/fleet"
	"github.com/kubeboot/kubeboot/phases"
)

// Admission is what AdmitWorkers did for one worker.
type Admission struct {
	// Node is the worker's name.
	Node string `json:"node"`
	// TokenID is its token's ID, the public half.
	TokenID string `json:"tokenID"`
	// Result is "joined" when its Node exists (nothing was done: its
	// token is spent), else what the apply of its token did: "created",
	// "updated" or "unchanged".
	Result string `json:"result"`
	// Expires is when its token stops being valid; zero for a joined
	// worker.
	Expires time.Time `json:"expires,omitzero"`
}

// Joined is the Admission.Result of a worker whose Node exists.
const Joined = "joined"

// AdmitWorkers makes sure that every worker of a fleet that has not
// joined can join: its node-bound token exists in the cluster, as the
// first control-plane node's init would make it, and is valid for its
// ttl from now if it had expired (phases.ApplyToken). A worker whose
// token the first node's file lists keeps init's label on it; one added
// later gets phases.CreatedByConfigFleet. A worker whose Node exists is
// left alone.
func AdmitWorkers(ctx context.Context, client kubernetes.Interface, workers []fleet.WorkerToken, now time.Time) ([]Admission, error) {
	admitted := make([]Admission, 0, len(workers))
	for _, w := range workers {
		_, err := client.CoreV1().Nodes().Get(ctx, w.Node, metav1.GetOptions{})
		switch {
		case err == nil:
			admitted = append(admitted, Admission{Node: w.Node, TokenID: tokenID(w.Token.Token), Result: Joined})
			continue
		case !apierrors.IsNotFound(err):
			return admitted, fmt.Errorf("node %s: get its Node: %w", w.Node, err)
		}
		createdBy := phases.CreatedByConfigFleet
		if w.InFirstFile {
			createdBy = phases.CreatedByInitConfig
		}
		info, verb, err := phases.ApplyToken(ctx, client, w.Token, createdBy, now)
		if err != nil {
			return admitted, fmt.Errorf("node %s: %w", w.Node, err)
		}
		admitted = append(admitted, Admission{Node: w.Node, TokenID: info.Token.ID, Result: verb, Expires: info.Expires})
	}
	return admitted, nil
}

// tokenID is a token's ID, the part before its dot.
func tokenID(token string) string {
	id, _, _ := strings.Cut(token, ".")
	return id
}
