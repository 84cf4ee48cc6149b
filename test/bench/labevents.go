package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
)

// The stages of a node's bring-up, derived from the events of `kubeboot
// lab up --cluster -o json` (labUp): a kubeboot node's are its bootstrap
// unit's own events, forwarded from its journal; a kubeadm node's, the
// lab's events at kubeadm's start and return.
const (
	// stageStarted is when the tool started: the bootstrap unit's start,
	// read from the node's systemd after lab up (unitStart), or the lab's
	// event just before it runs kubeadm.
	stageStarted = "started"
	// stageFirstEvent is a kubeboot node's first event: the end of its
	// preflight.
	stageFirstEvent = "first-event"
	// stageClusterReached is when a joining node first reached the
	// cluster: a worker's discovery succeeded, a control-plane node's
	// download-certs fetched the cluster secrets. It has waited for the
	// first node until then.
	stageClusterReached = "cluster-reached"
	// stageKubeletStart is the end of the kubelet-start phase: kubelet.service
	// restarted with kubeboot's drop-in.
	stageKubeletStart = "kubelet-start"
	// stageEtcdAdded, stageEtcdStarted and stageEtcdPromoted are a joining
	// control-plane node's etcd member added as a learner, answering and
	// following the leader, and promoted.
	stageEtcdAdded    = "etcd-member-added"
	stageEtcdStarted  = "etcd-member-started"
	stageEtcdPromoted = "etcd-promoted"
	// stageHealthy is the wait phase's event after which all four
	// control-plane components were healthy.
	stageHealthy = "healthy"
	// stageClientCert is a worker's kubelet holding its client certificate:
	// its TLS bootstrap done, where `kubeadm join` returns.
	stageClientCert = "client-certificate"
	// stageNodeReady is a worker's Node Ready.
	stageNodeReady = "node-ready"
	// stageDone is the tool's return: a kubeboot node's last event, or
	// the lab's event that kubeadm returned.
	stageDone = "done"
	// stageUp is the lab's event that the node is up.
	stageUp = "up"
)

// nodeStages are one node's stage times.
type nodeStages map[string]time.Time

// labLine is one line of `lab up --cluster -o json`: an event, or the
// final result.
type labLine struct {
	Time   time.Time  `json:"time"`
	Phase  string     `json:"phase"`
	Level  string     `json:"level"`
	Msg    string     `json:"msg"`
	Result *labResult `json:"result"`
}

// labResult is lab up's result.
type labResult struct {
	OK    bool `json:"ok"`
	Nodes []struct {
		Name string `json:"name"`
		Role string `json:"role"`
	} `json:"nodes"`
}

// labUp is what a run of `lab up --cluster` showed.
type labUp struct {
	// installed and booted are the lab's events that every machine was
	// installed, and booted.
	installed, booted time.Time
	nodes             map[string]nodeStages
	// kubeadm are the nodes that the real kubeadm brought up.
	kubeadm []string
	// failed counts each node's bootstrap attempts that failed and were
	// retried.
	failed map[string]int
	result *labResult
}

// span is the time from stage a of node na to stage b of node nb; zero if
// either is missing, which the tables show as such.
func (u labUp) span(na, a, nb, b string) time.Duration {
	ta, ok1 := u.nodes[na][a]
	tb, ok2 := u.nodes[nb][b]
	if !ok1 || !ok2 {
		return 0
	}
	return tb.Sub(ta)
}

// parseLabUp reads lab up's output and derives every node's stages.
func parseLabUp(out []byte) (labUp, error) {
	up := labUp{nodes: map[string]nodeStages{}, failed: map[string]int{}}
	health := map[string]map[string]bool{}
	for line := range bytes.Lines(out) {
		var l labLine
		if err := json.Unmarshal(line, &l); err != nil {
			return up, fmt.Errorf("decode lab up's line %q: %w", line, err)
		}
		if l.Result != nil {
			up.result = l.Result
			continue
		}
		node, phase, ok := strings.Cut(l.Phase, "/")
		if !ok {
			up.labEvent(l)
			continue
		}
		if up.nodes[node] == nil {
			up.nodes[node], health[node] = nodeStages{}, map[string]bool{}
		}
		switch phase {
		case "lab":
			if strings.HasPrefix(l.Msg, "up in ") {
				up.nodes[node][stageUp] = l.Time
			}
		case "kubeadm":
			up.kubeadmEvent(node, l)
		default:
			up.nodeEvent(node, phase, l, health[node])
		}
	}
	return up, nil
}

// labEvent takes the lab's own event.
func (u *labUp) labEvent(l labLine) {
	switch {
	case strings.Contains(l.Msg, " machines installed"):
		u.installed = l.Time
	case strings.HasSuffix(l.Msg, " machines booted"):
		u.booted = l.Time
	}
}

// kubeadmEvent takes the lab's event of kubeadm's start ("kubeadm init
// --config ...") or return ("kubeadm init returned") on node; its other
// events on the node, such as the pod network it installs after kubeadm
// init returned, are neither.
func (u *labUp) kubeadmEvent(node string, l labLine) {
	if !slices.Contains(u.kubeadm, node) {
		u.kubeadm = append(u.kubeadm, node)
	}
	switch {
	case !strings.HasPrefix(l.Msg, "kubeadm "):
	case strings.HasSuffix(l.Msg, " returned"):
		u.nodes[node][stageDone] = l.Time
	default:
		u.nodes[node][stageStarted] = l.Time
	}
}

// nodeEvent takes an event of a kubeboot node's bootstrap unit, in phase;
// health is the components' state as its wait phase last said.
func (u *labUp) nodeEvent(node, phase string, l labLine, health map[string]bool) {
	s := u.nodes[node]
	first := func(stage string) {
		if _, ok := s[stage]; !ok {
			s[stage] = l.Time
		}
	}
	first(stageFirstEvent)
	s[stageDone] = l.Time
	switch {
	case l.Level == "warning" && strings.HasPrefix(l.Msg, "attempt ") && strings.Contains(l.Msg, " failed"):
		u.failed[node]++
	case phase == "preflight" && strings.HasPrefix(l.Msg, "discovered the cluster"),
		phase == "download-certs" && strings.HasPrefix(l.Msg, "fetched "):
		first(stageClusterReached)
	case phase == "kubelet-start":
		s[stageKubeletStart] = l.Time
	case phase == "etcd-join" && strings.Contains(l.Msg, " is in the cluster of "):
		s[stageEtcdAdded] = l.Time
	case phase == "etcd-join" && strings.HasSuffix(l.Msg, " answers and follows the leader"):
		s[stageEtcdStarted] = l.Time
	case phase == "etcd-join" && strings.HasPrefix(l.Msg, "promoted etcd member"):
		s[stageEtcdPromoted] = l.Time
	case phase == "wait":
		if allHealthy(health, l.Msg) {
			s[stageHealthy] = l.Time
		}
	case phase == "kubelet-wait-bootstrap" && strings.HasPrefix(l.Msg, "the kubelet holds its client certificate"):
		s[stageClientCert] = l.Time
	case phase == "kubelet-wait-bootstrap" && strings.HasPrefix(l.Msg, "Node ") && strings.HasSuffix(l.Msg, " is Ready"):
		s[stageNodeReady] = l.Time
	}
}

// allHealthy takes a wait phase's message ("etcd: healthy after 3.2s",
// "kube-apiserver: unhealthy after ...", "...: waiting for ...") into
// health, and says whether it made all four components healthy.
func allHealthy(health map[string]bool, msg string) bool {
	component, state, ok := strings.Cut(msg, ": ")
	if !ok || !slices.Contains(config.ComponentNames, component) {
		return false
	}
	was := everyHealthy(health)
	health[component] = strings.HasPrefix(state, "healthy after ")
	return !was && everyHealthy(health)
}

// everyHealthy says whether health holds all four components healthy.
func everyHealthy(health map[string]bool) bool {
	return !slices.ContainsFunc(config.ComponentNames, func(c string) bool { return !health[c] })
}

// missing names the stages the report needs that a node lacks: a sign
// that lab up's events changed, which must fail the bench rather than
// show zeros.
func (u labUp) missing() error {
	if u.result == nil || !u.result.OK {
		return errors.New("lab up printed no successful result")
	}
	if u.installed.IsZero() || u.booted.IsZero() {
		return errors.New("lab up did not say when its machines were installed and when they booted")
	}
	var gaps []string
	for _, n := range u.result.Nodes {
		var want []string
		switch {
		case slices.Contains(u.kubeadm, n.Name):
			want = []string{stageStarted, stageDone}
		case n.Name == firstNode:
			want = []string{stageKubeletStart, stageHealthy, stageDone}
		case n.Role == "control-plane":
			want = []string{stageClusterReached, stageEtcdAdded, stageEtcdStarted, stageEtcdPromoted, stageHealthy, stageDone}
		default:
			want = []string{stageClusterReached, stageKubeletStart, stageClientCert, stageNodeReady, stageDone}
		}
		for _, stage := range append(want, stageUp) {
			if _, ok := u.nodes[n.Name][stage]; !ok {
				gaps = append(gaps, n.Name+" "+stage)
			}
		}
		s := u.nodes[n.Name]
		if started, done := s[stageStarted], s[stageDone]; !started.IsZero() && done.Before(started) {
			return fmt.Errorf("lab up's events show %s's tool returning (%s) before it started (%s)", n.Name, done.Format(time.RFC3339Nano), started.Format(time.RFC3339Nano))
		}
	}
	if len(gaps) > 0 {
		return fmt.Errorf("lab up's events do not show these stages: %s", strings.Join(gaps, ", "))
	}
	return nil
}
