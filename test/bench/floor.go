package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
)

// floor is what Kubernetes' own start took in a usable cluster's run,
// where no kubeboot code runs: read from the cluster's objects once it is
// usable, it is the floor under the stages it falls in.
type floor struct {
	// leads is when the controller-manager acquired its lease, which it
	// needs before it runs any controller (the CSR signer, the
	// DaemonSets' and Deployments' controllers).
	leads time.Time
	// signs is when the controller-manager started its signer of the
	// kubelets' client certificates: once it leads, it builds every
	// controller before it starts any.
	signs time.Time
	// coreDNS is the later CoreDNS pod's time from scheduled to Ready:
	// its sandbox, its start and its first good readiness probe. The
	// pods' conditions are stamped to the second.
	coreDNS time.Duration
}

// readFloor reads the floor from the cluster of kubeconfig with the bin
// dir's kubectl.
func readFloor(ctx context.Context, o options, kubeconfig string) (floor, error) {
	get := func(v any, args ...string) error {
		argv := append([]string{"--kubeconfig", kubeconfig, "-n", "kube-system", "get", "-o", "json"}, args...)
		out, err := exec.CommandContext(ctx, filepath.Join(o.binDir, "kubectl"), argv...).Output()
		if err != nil {
			return fmt.Errorf("kubectl get %v: %w", args, err)
		}
		return json.Unmarshal(out, v)
	}
	var f floor
	var lease coordinationv1.Lease
	if err := get(&lease, "lease", "kube-controller-manager"); err != nil {
		return f, err
	}
	if lease.Spec.AcquireTime == nil {
		return f, errors.New("lease kube-system/kube-controller-manager has no acquireTime")
	}
	f.leads = lease.Spec.AcquireTime.Time
	argv := []string{"--kubeconfig", kubeconfig, "-n", "kube-system", "logs", "--timestamps", "kube-controller-manager-" + firstNode}
	logs, err := exec.CommandContext(ctx, filepath.Join(o.binDir, "kubectl"), argv...).Output()
	if err != nil {
		return f, fmt.Errorf("kubectl %v: %w", argv[4:], err)
	}
	if f.signs, err = signerStarted(logs); err != nil {
		return f, err
	}
	var pods corev1.PodList
	if err := get(&pods, "pods", "-l", "k8s-app=kube-dns"); err != nil {
		return f, err
	}
	if f.coreDNS, err = scheduledToReady(pods.Items); err != nil {
		return f, err
	}
	return f, nil
}

// scheduledToReady is the longest time of pods from their PodScheduled
// condition to their Ready one; each must be both.
func scheduledToReady(pods []corev1.Pod) (time.Duration, error) {
	if len(pods) == 0 {
		return 0, errors.New("no CoreDNS pod")
	}
	var longest time.Duration
	for _, p := range pods {
		conds := p.Status.Conditions
		at := func(t corev1.PodConditionType) (time.Time, bool) {
			i := slices.IndexFunc(conds, func(c corev1.PodCondition) bool { return c.Type == t && c.Status == corev1.ConditionTrue })
			if i < 0 {
				return time.Time{}, false
			}
			return conds[i].LastTransitionTime.Time, true
		}
		scheduled, ok1 := at(corev1.PodScheduled)
		ready, ok2 := at(corev1.PodReady)
		if !ok1 || !ok2 {
			return 0, fmt.Errorf("pod %s is not both scheduled and Ready: %v", p.Name, conds)
		}
		longest = max(longest, ready.Sub(scheduled))
	}
	return longest, nil
}

// signerLine is what the controller-manager logs as it starts the signer
// of the kubelets' client certificates.
const signerLine = `"Starting certificate controller" name="csrsigning-kubelet-client"`

// signerStarted reads, from the controller-manager's log with the
// runtime's timestamps (kubectl logs --timestamps), when it started the
// signer of the kubelets' client certificates.
func signerStarted(logs []byte) (time.Time, error) {
	for line := range strings.Lines(string(logs)) {
		if !strings.Contains(line, signerLine) {
			continue
		}
		stamp, _, _ := strings.Cut(line, " ")
		return time.Parse(time.RFC3339Nano, stamp)
	}
	return time.Time{}, fmt.Errorf("the controller-manager's log has no line %s", signerLine)
}
