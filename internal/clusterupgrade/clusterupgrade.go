// Package clusterupgrade carries out `kubeboot upgrade cluster`: from any
// machine with an administrator's kubeconfig, every node moves to a
// release, the control-plane nodes one at a time and then the workers,
// each drained (its PodDisruptionBudgets respected, as kubectl drain does), upgraded on the node by a pod that runs the node's own
// kubeboot (OnNode), seen Ready at the release, and uncordoned. Its state
// is kept in the cluster (the kube-system/kubeboot-upgrade-cluster
// ConfigMap), so that a run stopped at any step, or failed at a node, is
// taken up where it stopped by the next. The plan, and what it refuses,
// is the caller's (controlplane.PlanUpgrade).
package clusterupgrade

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubeboot/kubeboot/internal/nodepod"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/templates"
)

// StateName is the ConfigMap in kube-system that holds an upgrade's state.
const StateName = "kubeboot-upgrade-cluster"

// Node is one node to upgrade, in the plan's order.
type Node struct {
	// Name is the Node's.
	Name string `json:"name"`
	// ControlPlane says that it runs the control plane.
	ControlPlane bool `json:"controlPlane"`
	// Current says that it runs the release already, kubelet and static
	// pods: it is left alone, unless a stopped run left it midway.
	Current bool `json:"-"`
}

// Options are an upgrade's settings.
type Options struct {
	// Version is the release every node moves to.
	Version string
	// Nodes are the cluster's nodes, the control-plane nodes first; the
	// first of them runs `upgrade apply`.
	Nodes []Node
	// NodeConfig is the node's file on every node.
	NodeConfig string
	// Install is kubelet.installCommand, which each node runs first.
	Install []string
	// KubeadmIgnorePreflightErrors is passed to `kubeadm upgrade node` on
	// the workers kubeadm joined.
	KubeadmIgnorePreflightErrors string
	// Image is the image of kubeboot's own pods, which the upgrade pods run.
	Image string
	// Kubeboot is the nodes' kubeboot binary.
	Kubeboot templates.Kubeboot
	// MaxUnavailable is how many workers are upgraded at once.
	MaxUnavailable int
	// DrainTimeout bounds a node's drain; NodeTimeout its upgrade and its
	// wait for the Node to be Ready at Version.
	DrainTimeout, NodeTimeout time.Duration
	// Poll is how often the pods and the Nodes are looked at.
	Poll time.Duration
}

// State is an upgrade's progress, as the cluster keeps it.
type State struct {
	// Version is the release the upgrade moves to.
	Version string `json:"version"`
	// Nodes are each node's step, by name.
	Nodes map[string]NodeState `json:"nodes"`
}

// NodeState is one node's step in State.
type NodeState struct {
	// Step is the last step it finished: StepCordoned, StepDrained,
	// StepUpgraded, StepDone, or StepFailed.
	Step string `json:"step"`
	// Cordoned says that this upgrade cordoned it, and so uncordons it.
	Cordoned bool `json:"cordoned,omitempty"`
}

// The steps of a node, in order, and a failure.
const (
	StepCordoned = "cordoned"
	StepDrained  = "drained"
	StepUpgraded = "upgraded"
	StepDone     = "done"
	StepFailed   = "failed"
)

// Result is what an upgrade did, node by node.
type Result struct {
	// Version is the release it moved to.
	Version string `json:"version"`
	// Nodes are the nodes in order, with what was done to each.
	Nodes []NodeResult `json:"nodes"`
}

// NodeResult is one node's part of a Result.
type NodeResult struct {
	Node
	// Outcome is "upgraded", "already at the release" or "failed", or
	// empty for a node not reached.
	Outcome string `json:"outcome,omitempty"`
	// Seconds is how long its upgrade took.
	Seconds float64 `json:"seconds,omitempty"`
}

// Upgrade is one run of `upgrade cluster`.
type Upgrade struct {
	client kubernetes.Interface
	opts   Options
	report *output.Reporter
	// mu guards state and its record, which the workers upgraded at
	// once share.
	mu    sync.Mutex
	state State
	// record keeps state in the ConfigMap StateName.
	record *nodepod.Record
}

// New is an upgrade of the cluster client reaches, with opts.
func New(client kubernetes.Interface, opts Options, report *output.Reporter) *Upgrade {
	if opts.MaxUnavailable < 1 {
		opts.MaxUnavailable = 1
	}
	if opts.Poll <= 0 {
		opts.Poll = 2 * time.Second
	}
	return &Upgrade{client: client, opts: opts, report: report,
		record: &nodepod.Record{Client: client, Name: StateName, Command: "upgrade cluster", Poll: opts.Poll}}
}

// Run upgrades every node not done yet, stopping at the first that fails.
// The state it resumes is refused when it moves to another release and is
// unfinished.
func (u *Upgrade) Run(ctx context.Context) (Result, error) {
	res := Result{Version: u.opts.Version}
	for _, n := range u.opts.Nodes {
		res.Nodes = append(res.Nodes, NodeResult{Node: n})
	}
	if err := u.loadState(ctx); err != nil {
		return res, err
	}
	var cps, workers []int
	for i, n := range u.opts.Nodes {
		if n.ControlPlane {
			cps = append(cps, i)
		} else {
			workers = append(workers, i)
		}
	}
	for _, i := range cps {
		if err := u.upgradeNode(ctx, &res.Nodes[i], i == cps[0]); err != nil {
			return res, err
		}
	}
	for start := 0; start < len(workers); start += u.opts.MaxUnavailable {
		batch := workers[start:min(start+u.opts.MaxUnavailable, len(workers))]
		errs := make([]error, len(batch))
		var wg sync.WaitGroup
		for j, i := range batch {
			wg.Go(func() { errs[j] = u.upgradeNode(ctx, &res.Nodes[i], false) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return res, err
		}
	}
	return res, nil
}

// loadState reads the state a stopped run left, or starts one. A state
// of another release is taken over only when every node it names is done.
func (u *Upgrade) loadState(ctx context.Context) error {
	u.state = State{Version: u.opts.Version, Nodes: map[string]NodeState{}}
	var s State
	found, err := u.record.Load(ctx, &s)
	if err != nil || !found {
		return err
	}
	if s.Version == u.opts.Version {
		if s.Nodes != nil {
			u.state = s
		}
		u.report.Infof("resuming the upgrade to %s that kube-system/%s records", s.Version, StateName)
		return nil
	}
	for name, n := range s.Nodes {
		if n.Step != StepDone {
			return fmt.Errorf("kube-system/%s records an unfinished upgrade to %s (%s: %s): run `kubeboot upgrade cluster %s` to finish it first", StateName, s.Version, name, n.Step, s.Version)
		}
	}
	return nil
}

// setStep records node's step in the cluster.
func (u *Upgrade) setStep(ctx context.Context, node string, change func(*NodeState)) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := u.state.Nodes[node]
	change(&n)
	u.state.Nodes[node] = n
	return u.record.Save(ctx, u.state)
}

// step is node's recorded step.
func (u *Upgrade) step(node string) NodeState {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.state.Nodes[node]
}

// upgradeNode takes node through its steps from the one recorded: cordon,
// drain, the upgrade pod, Ready at the release (and for a control-plane
// node, a controller-manager leading again), uncordon. A failure
// uncordons a node this upgrade cordoned: `upgrade apply` and `upgrade
// node` have rolled back what they changed.
func (u *Upgrade) upgradeNode(ctx context.Context, res *NodeResult, apply bool) error {
	name := res.Name
	report := func(format string, args ...any) {
		u.report.Event(output.Event{Phase: name, Level: output.LevelInfo, Msg: fmt.Sprintf(format, args...), Fields: map[string]any{"node": name, "step": u.step(name).Step}})
	}
	node, err := u.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	step := u.step(name).Step
	if (step == StepDone || (step == "" && res.Current)) && atVersion(node, u.opts.Version) {
		res.Outcome = "already at the release"
		report("upgraded already: Ready at %s", u.opts.Version)
		return nil
	}
	start := time.Now()
	err = u.upgradeSteps(ctx, node, apply, report)
	res.Seconds = time.Since(start).Seconds()
	if err == nil {
		res.Outcome = "upgraded"
		return nil
	}
	res.Outcome = StepFailed
	if ctx.Err() != nil {
		// Stopped: the state says where the next run takes up.
		return fmt.Errorf("%s: %w", name, err)
	}
	u.report.Event(output.Event{Phase: name, Level: output.LevelError, Msg: err.Error(), Fields: map[string]any{"node": name, "step": StepFailed}})
	cordoned := u.step(name).Cordoned
	if cordoned {
		if uerr := u.cordon(ctx, name, false); uerr != nil {
			err = errors.Join(err, uerr)
		} else {
			cordoned = false
		}
	}
	// A node left cordoned stays this upgrade's to uncordon.
	if serr := u.setStep(ctx, name, func(n *NodeState) { n.Step, n.Cordoned = StepFailed, cordoned }); serr != nil {
		err = errors.Join(err, serr)
	}
	return fmt.Errorf("%s: %w; the upgrade stopped there: fix the node, then run `kubeboot upgrade cluster %s` again to take it up", name, err, u.opts.Version)
}

// upgradeSteps are upgradeNode's steps after the one recorded.
func (u *Upgrade) upgradeSteps(ctx context.Context, node *corev1.Node, apply bool, report func(string, ...any)) error {
	name := node.Name
	switch u.step(name).Step {
	case "", StepFailed, StepDone:
		if err := u.removePod(ctx, name); err != nil {
			return err
		}
		ours := !node.Spec.Unschedulable || u.step(name).Cordoned
		if err := u.setStep(ctx, name, func(n *NodeState) { n.Step, n.Cordoned = StepCordoned, ours }); err != nil {
			return err
		}
		if ours {
			if err := u.cordon(ctx, name, true); err != nil {
				return err
			}
		}
		report("cordoned")
		fallthrough
	case StepCordoned:
		if err := u.drain(ctx, name, report); err != nil {
			return fmt.Errorf("drain: %w", err)
		}
		if err := u.setStep(ctx, name, func(n *NodeState) { n.Step = StepDrained }); err != nil {
			return err
		}
		report("drained")
		fallthrough
	case StepDrained:
		if err := u.runPod(ctx, node, apply, report); err != nil {
			return err
		}
		if err := u.setStep(ctx, name, func(n *NodeState) { n.Step = StepUpgraded }); err != nil {
			return err
		}
		fallthrough
	case StepUpgraded:
		if err := u.waitReady(ctx, name); err != nil {
			return err
		}
		report("Ready at %s", u.opts.Version)
		if _, cp := node.Labels["node-role.kubernetes.io/control-plane"]; cp {
			if err := u.waitControllersLed(ctx, report); err != nil {
				return err
			}
		}
		if u.step(name).Cordoned {
			if err := u.cordon(ctx, name, false); err != nil {
				return err
			}
			report("uncordoned")
		}
		if err := u.setStep(ctx, name, func(n *NodeState) { n.Step, n.Cordoned = StepDone, false }); err != nil {
			return err
		}
		return u.removePod(ctx, name)
	default:
		return fmt.Errorf("kube-system/%s records the unknown step %q: delete the ConfigMap once no upgrade runs, then run again", StateName, u.step(name).Step)
	}
}

// podName is the name of node's upgrade pod.
func podName(node string) string { return templates.UpgradePodPrefix + node }

// runPod runs node's upgrade pod, or waits for the one a stopped run
// started, until it ends, and fails with its output when it failed.
func (u *Upgrade) runPod(ctx context.Context, node *corev1.Node, apply bool, report func(string, ...any)) error {
	args := []string{"--node-config", u.opts.NodeConfig, "--kubernetes-version", u.opts.Version}
	if apply {
		args = append(args, "--apply")
	}
	if _, cp := node.Labels["node-role.kubernetes.io/control-plane"]; cp {
		args = append(args, "--control-plane")
	}
	if u.opts.KubeadmIgnorePreflightErrors != "" {
		args = append(args, "--kubeadm-ignore-preflight-errors", u.opts.KubeadmIgnorePreflightErrors)
	}
	if len(u.opts.Install) > 0 {
		args = append(append(args, "--"), u.opts.Install...)
	}
	pod := templates.UpgradePod(node.Name, u.opts.Image, u.opts.Kubeboot, args)
	if err := u.pods().Run(ctx, pod, "upgrade", report); err != nil {
		return err
	}
	report("upgraded on the node")
	return nil
}

// pods runs the upgrade pods.
func (u *Upgrade) pods() nodepod.Runner {
	return nodepod.Runner{Client: u.client, Poll: u.opts.Poll, Timeout: u.opts.NodeTimeout}
}

// removePod deletes node's upgrade pod, if any, and waits until it is gone.
func (u *Upgrade) removePod(ctx context.Context, node string) error {
	return u.pods().Remove(ctx, metav1.NamespaceSystem, podName(node))
}

// waitReady waits until node's Node is Ready with the kubelet of the
// release.
func (u *Upgrade) waitReady(ctx context.Context, name string) error {
	deadline := time.Now().Add(u.opts.NodeTimeout)
	var last string
	for {
		node, err := u.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err == nil && atVersion(node, u.opts.Version) {
			return nil
		}
		if err == nil {
			last = fmt.Sprintf("its kubelet reports %s, Ready %s", node.Status.NodeInfo.KubeletVersion, readyStatus(node))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the Node was not Ready at %s within --node-timeout %s (%s)", u.opts.Version, u.opts.NodeTimeout, last)
		}
		if err := nodepod.Sleep(ctx, u.opts.Poll); err != nil {
			return err
		}
	}
}

// atVersion says whether node is Ready with the kubelet of version.
func atVersion(node *corev1.Node, version string) bool {
	return node.Status.NodeInfo.KubeletVersion == version && readyStatus(node) == corev1.ConditionTrue
}

// readyStatus is node's Ready condition's status.
func readyStatus(node *corev1.Node) corev1.ConditionStatus {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}
