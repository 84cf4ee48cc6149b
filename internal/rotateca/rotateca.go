// Package rotateca carries out `kubeboot certs rotate-ca`: from any
// machine with an administrator's kubeconfig, the cluster CA, the etcd
// CA, the front-proxy CA and the service-account key are replaced on
// every node, through the cluster. The new CAs are made here, their keys
// wrapped to the old cluster CA, which only the control-plane nodes hold
// (pki.Rotation.Files), and kept in the kube-system/kubeboot-rotate-ca
// Secret, which each node's pod mounts. The steps, each finished on every
// node it concerns before the next begins:
//
//  1. trust: every node trusts the new CAs and key beside the old, and so
//     does the cluster-info ConfigMap;
//  2. restart-pods: once every namespace's kube-root-ca.crt holds the new
//     CA, the workloads are restarted, so that their pods trust it too;
//  3. reissue: each control-plane node signs with the new CAs and key and
//     reissues its certificates and kubeconfigs with them;
//  4. admin-kubeconfig: this run's own kubeconfig gets a certificate of
//     the new CA and trusts it;
//  5. kubelet: each kubelet's certificates come from the new CA;
//  6. refresh-pods: the workloads are restarted again, for service-account
//     tokens of the new key;
//  7. drop: every node, the cluster-info ConfigMap and this run's
//     kubeconfig trust the new CAs alone.
//
// Each node's work is its own kubeboot's (OnNode), run by a pod on the
// node. The state is kept in the kube-system/kubeboot-rotate-ca
// ConfigMap, so that a run stopped anywhere is taken up by the next.
package rotateca

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/nodepod"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/pki"
	"github.com/kubeboot/kubeboot/templates"
)

// StateName is the ConfigMap in kube-system that holds a rotation's
// state; its files are the Secret of the same name
// (templates.RotateCAMaterial).
const StateName = templates.RotateCAMaterial

// The cluster's steps, in order, and the end.
const (
	StepTrust           = "trust"
	StepRestartPods     = "restart-pods"
	StepReissue         = "reissue"
	StepAdminKubeconfig = "admin-kubeconfig"
	StepKubelet         = "kubelet"
	StepRefreshPods     = "refresh-pods"
	StepDrop            = "drop"
	StepDone            = "done"
)

// Steps are the cluster's steps in order.
var Steps = []string{StepTrust, StepRestartPods, StepReissue, StepAdminKubeconfig, StepKubelet, StepRefreshPods, StepDrop}

// Node is one node of the cluster.
type Node struct {
	// Name is the Node's.
	Name string `json:"name"`
	// ControlPlane says that it runs the control plane.
	ControlPlane bool `json:"controlPlane"`
}

// Options are a rotation's settings.
type Options struct {
	// Config is the cluster's configuration (kube-system/kubeboot-config):
	// the new CAs' algorithm and validity, and which CAs there are.
	Config *config.ClusterConfiguration
	// Nodes are the cluster's nodes, the control-plane nodes first.
	Nodes []Node
	// NodeConfig is the node's file on every node.
	NodeConfig string
	// Image is the image of kubeboot's own pods, which the pods run.
	Image string
	// Kubeboot is the nodes' kubeboot binary.
	Kubeboot templates.Kubeboot
	// NodeTimeout bounds a node's step; RolloutTimeout a restart of the
	// workloads.
	NodeTimeout, RolloutTimeout time.Duration
	// Poll is how often the pods and workloads are looked at.
	Poll time.Duration
}

// Admin is the run's own access to the cluster, which the rotation
// moves to the new CA: its kubeconfig file, and how a client is made of
// it.
type Admin struct {
	// Kubeconfig is the file's path.
	Kubeconfig string
	// Client makes a client of the kubeconfig at a path.
	Client func(path string) (kubernetes.Interface, error)
}

// ClusterNodes are the cluster's nodes, the control-plane nodes first,
// each part by name.
func ClusterNodes(ctx context.Context, client kubernetes.Interface) ([]Node, error) {
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list the nodes: %w", err)
	}
	var nodes []Node
	for _, n := range list.Items {
		_, cp := n.Labels["node-role.kubernetes.io/control-plane"]
		nodes = append(nodes, Node{Name: n.Name, ControlPlane: cp})
	}
	slices.SortFunc(nodes, func(a, b Node) int {
		if a.ControlPlane != b.ControlPlane {
			if a.ControlPlane {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	return nodes, nil
}

// State is a rotation's progress, as the cluster keeps it.
type State struct {
	// ID names the rotation: the start of the new cluster CA's SHA-256.
	ID string `json:"id"`
	// Step is the last step finished on every node: one of Steps, or
	// StepDone.
	Step string `json:"step"`
	// Nodes are, for the step under way, the nodes that finished it.
	Nodes []string `json:"nodes,omitempty"`
}

// Result is what a rotation did.
type Result struct {
	// ID names the rotation.
	ID string `json:"id"`
	// Steps are the steps this run finished, each with its time.
	Steps []StepResult `json:"steps"`
}

// StepResult is one step of a Result.
type StepResult struct {
	Step    string  `json:"step"`
	Seconds float64 `json:"seconds"`
}

// Rotation is one run of `certs rotate-ca`.
type Rotation struct {
	client kubernetes.Interface
	admin  Admin
	opts   Options
	report *output.Reporter
	state  State
	// record keeps state in the ConfigMap StateName.
	record *nodepod.Record
	// files are the rotation's (pki.Rotation.Files); newCA is the new
	// cluster CA's certificate.
	files map[string][]byte
	newCA []byte
}

// New is a rotation of the cluster admin reaches, with opts.
func New(admin Admin, opts Options, report *output.Reporter) (*Rotation, error) {
	client, err := admin.Client(admin.Kubeconfig)
	if err != nil {
		return nil, err
	}
	if opts.Poll <= 0 {
		opts.Poll = 2 * time.Second
	}
	return &Rotation{client: client, admin: admin, opts: opts, report: report,
		record: &nodepod.Record{Client: client, Name: StateName, Command: "kubeboot certs rotate-ca", Poll: opts.Poll}}, nil
}

// Run takes the rotation from the step recorded, or from the start, to
// its end, stopping at the first step that fails.
func (r *Rotation) Run(ctx context.Context) (Result, error) {
	if err := r.load(ctx); err != nil {
		return Result{}, err
	}
	res := Result{ID: r.state.ID}
	steps := map[string]func(context.Context) error{
		StepTrust:           r.trust,
		StepRestartPods:     func(ctx context.Context) error { return r.restartPods(ctx, StepRestartPods) },
		StepReissue:         func(ctx context.Context) error { return r.nodes(ctx, pki.RotationReissue, true) },
		StepAdminKubeconfig: r.adminKubeconfig,
		StepKubelet:         func(ctx context.Context) error { return r.nodes(ctx, pki.RotationKubelet, false) },
		StepRefreshPods:     func(ctx context.Context) error { return r.restartPods(ctx, StepRefreshPods) },
		StepDrop:            r.drop,
	}
	next := 0
	if r.state.Step != "" {
		next = slices.Index(Steps, r.state.Step) + 1
	}
	for _, step := range Steps[next:] {
		start := time.Now()
		r.report.Event(output.Event{Phase: step, Level: output.LevelInfo, Msg: "started", Fields: map[string]any{"step": step}})
		if err := steps[step](ctx); err != nil {
			return res, fmt.Errorf("%s: %w; run `kubeboot certs rotate-ca` again to take the rotation up there", step, err)
		}
		done := step
		if step == StepDrop {
			done = StepDone
		}
		if err := r.save(ctx, func(s *State) { s.Step, s.Nodes = done, nil }); err != nil {
			return res, err
		}
		res.Steps = append(res.Steps, StepResult{Step: step, Seconds: time.Since(start).Seconds()})
		r.report.Event(output.Event{Phase: step, Level: output.LevelInfo, Msg: fmt.Sprintf("done in %.0fs", time.Since(start).Seconds()), Fields: map[string]any{"step": step}})
	}
	return res, r.cleanUp(ctx)
}

// load reads the state a stopped run left and its files, or starts a
// rotation: new CAs, their files in the Secret, then the state.
func (r *Rotation) load(ctx context.Context) error {
	found, err := r.record.Load(ctx, &r.state)
	if err != nil {
		return err
	}
	if found && r.state.Step != StepDone {
		if err := r.readFiles(ctx); err != nil {
			return err
		}
		r.report.Infof("resuming the CA rotation %s that kube-system/%s records, after its step %q", r.state.ID, StateName, r.state.Step)
		return nil
	}
	if err := r.checkReady(ctx); err != nil {
		return err
	}
	if err := r.readFiles(ctx); apierrors.IsNotFound(errors.Unwrap(err)) {
		if err := r.makeFiles(ctx); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	sum := sha256.Sum256(r.newCA)
	id := hex.EncodeToString(sum[:6])
	r.report.Infof("starting the CA rotation %s: the nodes in this order: %s", id, r.names())
	return r.save(ctx, func(s *State) { *s = State{ID: id} })
}

// names lists the nodes, for messages.
func (r *Rotation) names() string {
	var out []string
	for _, n := range r.opts.Nodes {
		out = append(out, n.Name)
	}
	return fmt.Sprint(out)
}

// checkReady refuses a rotation while any node is not Ready: every node
// takes part.
func (r *Rotation) checkReady(ctx context.Context) error {
	for _, n := range r.opts.Nodes {
		if err := r.nodeReady(ctx, n.Name); err != nil {
			return err
		}
	}
	return nil
}

// nodeReady fails unless node is Ready, saying what to do.
func (r *Rotation) nodeReady(ctx context.Context, node string) error {
	n, err := r.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("%s: %w", node, err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return nil
		}
	}
	return fmt.Errorf("node %s is not Ready: every node takes part in a CA rotation; bring it back, or remove it from the cluster (`kubeboot reset --delete-node` on it, or `kubectl delete node %s`), then run again", node, node)
}

// readFiles reads the rotation's files from its Secret.
func (r *Rotation) readFiles(ctx context.Context) error {
	s, err := r.client.CoreV1().Secrets(metav1.NamespaceSystem).Get(ctx, templates.RotateCAMaterial, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read kube-system/%s, the rotation's new CAs: %w", templates.RotateCAMaterial, err)
	}
	r.files = s.Data
	r.newCA, err = pki.RotationClusterCA(r.files)
	if err != nil {
		return fmt.Errorf("kube-system/%s: %w", templates.RotateCAMaterial, err)
	}
	return nil
}

// makeFiles makes the new CAs and keeps their files in the Secret, their
// keys wrapped to the cluster CA that cluster-info names.
func (r *Rotation) makeFiles(ctx context.Context) error {
	old, err := r.clusterInfoCA(ctx)
	if err != nil {
		return err
	}
	if n := bytes.Count(old, []byte("BEGIN CERTIFICATE")); n != 1 {
		return fmt.Errorf("kube-public/cluster-info trusts %d CAs, not one: a rotation not kubeboot's is under way; finish it first", n)
	}
	rot, err := pki.NewRotation(r.opts.Config)
	if err != nil {
		return err
	}
	files, err := rot.Files(old)
	if err != nil {
		return err
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: templates.RotateCAMaterial, Namespace: metav1.NamespaceSystem},
		Type: corev1.SecretTypeOpaque, Data: files}
	if _, err := r.client.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("keep the new CAs in kube-system/%s: %w", templates.RotateCAMaterial, err)
	}
	r.files, r.newCA = files, rot.CAs[config.CertCA].Cert
	return nil
}

// save changes the state and records it in the cluster.
func (r *Rotation) save(ctx context.Context, change func(*State)) error {
	change(&r.state)
	return r.record.Save(ctx, r.state)
}

// nodes runs step on each node that has it and has not finished it, the
// control-plane nodes only with cpOnly, one at a time, each checked Ready
// first.
func (r *Rotation) nodes(ctx context.Context, step pki.RotationStep, cpOnly bool) error {
	for _, n := range r.opts.Nodes {
		if (cpOnly && !n.ControlPlane) || slices.Contains(r.state.Nodes, n.Name) {
			continue
		}
		if err := r.onNode(ctx, n, step); err != nil {
			return err
		}
		if err := r.save(ctx, func(s *State) { s.Nodes = append(s.Nodes, n.Name) }); err != nil {
			return err
		}
	}
	return nil
}

// onNode runs step on node through its pod, and removes the pod once it
// succeeded; a failed one is kept for its log, which the error quotes.
func (r *Rotation) onNode(ctx context.Context, n Node, step pki.RotationStep) error {
	report := func(format string, args ...any) {
		r.report.Event(output.Event{Phase: n.Name, Level: output.LevelInfo, Msg: fmt.Sprintf(format, args...), Fields: map[string]any{"node": n.Name, "step": string(step)}})
	}
	if err := r.nodeReady(ctx, n.Name); err != nil {
		return err
	}
	args := []string{"--step", string(step), "--node-config", r.opts.NodeConfig}
	if n.ControlPlane {
		args = append(args, "--control-plane")
	}
	pod := templates.RotateCAPod(n.Name, string(step), r.opts.Image, r.opts.Kubeboot, args)
	runner := nodepod.Runner{Client: r.client, Poll: r.opts.Poll, Timeout: r.opts.NodeTimeout}
	// The pod of a run that failed here is kept for its log until then.
	if p, err := r.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); err == nil && p.Status.Phase == corev1.PodFailed {
		if err := runner.Remove(ctx, pod.Namespace, pod.Name); err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
	}
	if err := runner.Run(ctx, pod, "rotation's "+string(step), report); err != nil {
		return fmt.Errorf("%s: %w", n.Name, err)
	}
	report("%s: done", step)
	return runner.Remove(ctx, pod.Namespace, pod.Name)
}

// cleanUp removes the rotation's Secret once it is done: the new CAs'
// keys are on the control-plane nodes alone from then on.
func (r *Rotation) cleanUp(ctx context.Context) error {
	err := r.client.CoreV1().Secrets(metav1.NamespaceSystem).Delete(ctx, templates.RotateCAMaterial, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove kube-system/%s, the rotation's new CAs: %w", templates.RotateCAMaterial, err)
	}
	r.report.Infof("the CA rotation %s is done: every node trusts and signs with the new CAs alone", r.state.ID)
	return nil
}
