// Package nodepod is work done on a node through a pod of its own, for
// the commands that act on every node from an administrator's machine
// (`upgrade cluster`, `certs rotate-ca`): on the cluster's side, running
// a pod bound to a node until it ends and quoting its log when it fails
// (Runner); on the node's side, entering the node's root the pod mounts
// and running the node's own commands there as transient systemd units
// (Host), which a kubelet restart does not stop.
package nodepod

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Runner runs pods on nodes through client, looking at them every Poll,
// for at most Timeout each.
type Runner struct {
	Client  kubernetes.Interface
	Poll    time.Duration
	Timeout time.Duration
}

// Run creates pod, or waits for the one of its name a stopped run
// created, until it ends; a pod that fails is kept, and its log quoted in
// the error. what names what the pod does ("upgrade"), for the messages.
func (r Runner) Run(ctx context.Context, pod *corev1.Pod, what string, report func(string, ...any)) error {
	pods := r.Client.CoreV1().Pods(pod.Namespace)
	existing, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create the %s pod %s/%s: %w", what, pod.Namespace, pod.Name, err)
		}
		report("the %s runs on the node: pod %s/%s", what, pod.Namespace, pod.Name)
	case err != nil:
		return err
	default:
		report("waiting for pod %s/%s, which a stopped run started (%s)", pod.Namespace, pod.Name, existing.Status.Phase)
	}
	deadline := time.Now().Add(r.Timeout)
	for {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		switch {
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			// The API server may be the one the node restarts.
		case p.Status.Phase == corev1.PodSucceeded:
			return nil
		case p.Status.Phase == corev1.PodFailed:
			return fmt.Errorf("the %s on the node failed (pod %s/%s, kept for its logs):\n%s", what, pod.Namespace, pod.Name, r.Log(ctx, pod.Namespace, pod.Name))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the %s pod %s/%s did not end within --node-timeout %s (%s): is the node up?", what, pod.Namespace, pod.Name, r.Timeout, Status(p))
		}
		if err := Sleep(ctx, r.Poll); err != nil {
			return err
		}
	}
}

// Status says why a pod is where it is.
func Status(p *corev1.Pod) string {
	if p == nil {
		return "not read"
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Waiting != nil {
			return fmt.Sprintf("%s, %s: %s", p.Status.Phase, c.State.Waiting.Reason, c.State.Waiting.Message)
		}
	}
	return string(p.Status.Phase)
}

// Log is the end of a pod's log, or why it could not be read.
func (r Runner) Log(ctx context.Context, namespace, pod string) string {
	lines := int64(50)
	data, err := r.Client.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{TailLines: &lines}).DoRaw(ctx)
	if err != nil {
		return fmt.Sprintf("(its log cannot be read: %v; on the node, its units' output is in %s)", err, LogDir)
	}
	return strings.TrimRight(string(data), "\n")
}

// Remove deletes a pod that has ended, if there is one, and waits until
// it is gone; one still running is an error.
func (r Runner) Remove(ctx context.Context, namespace, name string) error {
	pods := r.Client.CoreV1().Pods(namespace)
	return Retry(ctx, r.Poll, func() error {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			return fmt.Errorf("the pod %s/%s still runs (%s): wait for it to end", namespace, p.Name, p.Status.Phase)
		}
		if err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return fmt.Errorf("the pod %s/%s is being deleted", namespace, p.Name)
	})
}

// Retry runs call until it succeeds, for as long as 30 polls: the work on
// a control-plane node restarts the API server that may answer.
func Retry(ctx context.Context, poll time.Duration, call func() error) error {
	var err error
	for range 30 {
		if err = call(); err == nil {
			return nil
		}
		if serr := Sleep(ctx, poll); serr != nil {
			return errors.Join(err, serr)
		}
	}
	return err
}

// Sleep waits d, or until ctx ends.
func Sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
