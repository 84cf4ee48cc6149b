package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// labUpSample is a `lab up --cluster -o json` of cp1 (kubeboot init), w1
// (a kubeboot worker whose first attempt failed), w2 (kubeadm join) and
// cp2 (kubeboot join --control-plane): each line an offset in seconds from
// t0, the phase, the level and the message, as the lab and the nodes'
// bootstrap units print them (trimmed to what matters, and a few others).
var labUpSample = []struct {
	at              float64
	phase, level, m string
}{
	{0.2, "lab", "info", "network: namespaces kb-kbb (the bridge, on 10.89.30.1) and kb-kbb-<node>"},
	{0.3, "lab", "info", "load balancer on 10.89.30.10:6443, and on 127.0.0.1:37979 for this host"},
	{4.0, "lab", "info", "4 machines installed in /tmp/kbb-1/cluster"},
	{6.0, "lab", "info", "4 machines booted"},
	{7.0, "cp1/preflight", "info", "all checks passed"},
	{7.1, "cp1/kubeconfig", "info", "wrote /etc/kubernetes/admin.conf"},
	{7.5, "cp1/write-manifests", "info", "wrote /etc/kubernetes/manifests/etcd.yaml"},
	{7.8, "cp1/kubelet-start", "info", "wrote /etc/systemd/system/kubelet.service.d/20-kubeboot.conf"},
	{8.0, "cp1/kubelet-start", "info", "restarted kubelet.service with /etc/systemd/system/kubelet.service.d/20-kubeboot.conf"},
	{8.1, "cp1/wait", "info", "etcd: waiting for https://127.0.0.1:2379"},
	{8.1, "cp1/wait", "info", "kube-apiserver: waiting for https://10.89.30.10:6443/livez, /readyz"},
	{8.1, "cp1/wait", "info", "kube-controller-manager: waiting for https://127.0.0.1:10257/healthz"},
	{8.1, "cp1/wait", "info", "kube-scheduler: waiting for https://127.0.0.1:10259/livez"},
	{8.2, "cp1/wait", "info", "etcd: unhealthy after 0s: https://127.0.0.1:2379: connection refused: nothing listens there"},
	{8.4, "w1/preflight", "info", "waiting: no answer from https://10.89.30.10:6443"},
	{10.3, "cp1/wait", "info", "kube-controller-manager: healthy after 2.3s"},
	{11.2, "cp1/wait", "info", "etcd: healthy after 3.2s"},
	{13.5, "cp1/wait", "info", "kube-scheduler: healthy after 5.5s"},
	{14.0, "cp1/wait", "info", "kube-scheduler: unhealthy after 5.9s: https://127.0.0.1:10259/livez: no answer in time"},
	{14.9, "cp1/wait", "info", "kube-apiserver: unhealthy after 6.9s: https://10.89.30.10:6443/livez: HTTP 500: failing checks: poststarthook/rbac/bootstrap-roles"},
	{15.3, "cp1/wait", "info", "kube-apiserver: healthy after 7.3s"},
	{15.6, "cp1/wait", "info", "kube-scheduler: healthy after 7.6s"},
	{15.7, "cp1/wait", "info", "etcd cluster: 1 members, leader cp1 (c084878b1d2bd300), learners: none"},
	{15.8, "cp1/bootstrap-admin", "info", "ClusterRoleBinding kubeadm:cluster-admins created"},
	{16.0, "w1/", "warning", "attempt 1 failed (exit code 1): phase preflight: discover the cluster: no answer; retrying in 10s"},
	{16.5, "cp1/cluster-info", "info", "ConfigMap kube-public/cluster-info created"},
	{17.0, "cp2/download-certs", "info", "waiting: the API server refuses anonymous GET of cluster-info (HTTP 403)"},
	{17.2, "cp2/download-certs", "info", "fetched 9 files of the cluster secrets from Secret kube-system/kubeadm-certs"},
	{17.9, "cp1/addon/kube-proxy", "info", "DaemonSet kube-system/kube-proxy created"},
	{18.0, "cp1/lab", "info", "up in 12.000s"},
	{18.5, "w2/kubeadm", "info", "kubeadm join --config /etc/kubernetes/kubeadm.yaml"},
	{19.0, "cp2/kubelet-start", "info", "restarted kubelet.service with /etc/systemd/system/kubelet.service.d/20-kubeboot.conf"},
	{19.5, "cp2/etcd-join", "info", "etcd member cp2 (5a1b) is in the cluster of 2 (learner: true)"},
	{21.0, "cp2/etcd-join", "info", "etcd member cp2 answers and follows the leader"},
	{22.0, "cp2/etcd-join", "info", "promoted etcd member cp2 to a voting member"},
	{26.0, "w1/preflight", "info", "waiting: cluster-info holds no signature jws-kubeconfig-af0o5s"},
	{26.2, "w1/preflight", "info", "discovered the cluster at https://10.89.30.10:6443 through token af0o5s; its CA has hash sha256:1bed"},
	{26.3, "w1/preflight", "info", "all checks passed"},
	{26.6, "w1/kubelet-start", "info", "restarted kubelet.service with /etc/systemd/system/kubelet.service.d/20-kubeboot.conf"},
	{26.7, "w1/kubelet-wait-bootstrap", "info", "waiting for the kubelet's TLS bootstrap: it writes /etc/kubernetes/kubelet.conf once the cluster has signed its client certificate"},
	{28.1, "w1/kubelet-wait-bootstrap", "info", "the kubelet holds its client certificate (/etc/kubernetes/kubelet.conf); waiting for Node w1 to be Ready"},
	{29.0, "cp2/wait", "info", "etcd: healthy after 0.1s"},
	{29.1, "cp2/wait", "info", "kube-controller-manager: healthy after 0.2s"},
	{29.2, "cp2/wait", "info", "kube-scheduler: healthy after 0.3s"},
	{30.0, "cp2/wait", "info", "kube-apiserver: healthy after 1.1s"},
	{30.5, "cp2/kubelet-finalize", "info", "/etc/kubernetes/kubelet.conf now names /var/lib/kubelet/pki/kubelet-client-current.pem, the client certificate the kubelet rotates"},
	{31.0, "cp2/lab", "info", "up in 25.000s"},
	{31.5, "w1/kubelet-wait-bootstrap", "info", "Node w1 is Ready"},
	{31.6, "w1/kubelet-wait-bootstrap", "info", "removed /etc/kubernetes/bootstrap-kubelet.conf: the kubelet has its own credential, and the token is needed no more"},
	{32.0, "w1/lab", "info", "up in 26.000s"},
	{33.0, "w2/kubeadm", "info", "kubeadm join returned"},
	{33.1, "w2/lab", "info", "up in 27.100s"},
	{34.0, "lab", "info", "pod networks routed between the nodes"},
	{40.0, "lab", "info", "use it: kubectl --kubeconfig /tmp/kbb-1/cluster/kubeconfig get nodes"},
}

// sampleOutput is labUpSample as lab up prints it, from t0, with the
// result line last.
func sampleOutput(t *testing.T, t0 time.Time) []byte {
	var b strings.Builder
	for _, e := range labUpSample {
		line, err := json.Marshal(map[string]any{"time": t0.Add(seconds(e.at)).Format(time.RFC3339Nano), "phase": e.phase, "level": e.level, "msg": e.m})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s\n", line)
	}
	b.WriteString(`{"result":{"ok":true,"kubeconfig":"/tmp/kbb-1/cluster/kubeconfig","endpoint":"127.0.0.1:37979","nodes":[` +
		`{"name":"cp1","role":"control-plane","address":"10.89.30.10","took":"12s"},` +
		`{"name":"w1","role":"worker","address":"10.89.30.11","took":"26s"},` +
		`{"name":"w2","role":"worker","join":"kubeadm","address":"10.89.30.12","took":"27.1s"},` +
		`{"name":"cp2","role":"control-plane","address":"10.89.30.13","took":"25s"}]}}` + "\n")
	return []byte(b.String())
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// TestParseLabUp: every node's stages come from its own events (a kubeboot
// node's) or the lab's events around kubeadm (a kubeadm node's): the
// control plane healthy when the last of the four components turned
// healthy, a worker's discovery, client certificate and Node Ready, a
// joining control-plane node's etcd steps, the tool's last event, the
// lab's word that each is up, and the failed attempts.
func TestParseLabUp(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 7, 31, 44, 0, time.UTC)
	up, err := parseLabUp(sampleOutput(t, t0))
	if err != nil {
		t.Fatal(err)
	}
	if err := up.missing(); err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]float64{
		"cp1": {stageFirstEvent: 7.0, stageKubeletStart: 8.0, stageHealthy: 15.6, stageDone: 17.9, stageUp: 18.0},
		"w1": {stageFirstEvent: 8.4, stageClusterReached: 26.2, stageKubeletStart: 26.6, stageClientCert: 28.1, stageNodeReady: 31.5,
			stageDone: 31.6, stageUp: 32.0},
		"w2": {stageStarted: 18.5, stageDone: 33.0, stageUp: 33.1},
		"cp2": {stageFirstEvent: 17.0, stageClusterReached: 17.2, stageKubeletStart: 19.0, stageEtcdAdded: 19.5, stageEtcdStarted: 21.0,
			stageEtcdPromoted: 22.0, stageHealthy: 30.0, stageDone: 30.5, stageUp: 31.0},
	}
	for node, stages := range want {
		if len(up.nodes[node]) != len(stages) {
			t.Errorf("%s: stages %v, want %v", node, up.nodes[node], stages)
		}
		for stage, at := range stages {
			if got := up.nodes[node][stage]; !got.Equal(t0.Add(seconds(at))) {
				t.Errorf("%s %s at %v, want %.1f s", node, stage, got.Sub(t0), at)
			}
		}
	}
	if !up.installed.Equal(t0.Add(4*time.Second)) || !up.booted.Equal(t0.Add(6*time.Second)) {
		t.Errorf("installed at %v, booted at %v: want 4 s and 6 s", up.installed.Sub(t0), up.booted.Sub(t0))
	}
	if len(up.kubeadm) != 1 || up.kubeadm[0] != "w2" {
		t.Errorf("kubeadm nodes %v, want [w2]", up.kubeadm)
	}
	if up.failed["w1"] != 1 || len(up.failed) != 1 {
		t.Errorf("failed attempts %v, want w1's one", up.failed)
	}
}

// TestParseLabUpKubeadmInit: a node that kubeadm inits has the lab's
// start and return of kubeadm, and its up; the lab's pod network after
// kubeadm returned is neither.
func TestParseLabUpKubeadmInit(t *testing.T) {
	out := `{"level":"info","msg":"1 machines installed in /tmp/kbb-1/cluster","phase":"lab","time":"2026-11-27T07:31:48Z"}
{"level":"info","msg":"1 machines booted","phase":"lab","time":"2026-11-27T07:31:50Z"}
{"level":"info","msg":"kubeadm init --config /etc/kubernetes/kubeadm.yaml","phase":"cp1/kubeadm","time":"2026-11-27T07:31:53Z"}
{"level":"info","msg":"kubeadm init returned","phase":"cp1/kubeadm","time":"2026-11-27T07:32:10.5Z"}
{"level":"info","msg":"kubeboot's pod network installed","phase":"cp1/kubeadm","time":"2026-11-27T07:32:10.55Z"}
{"level":"info","msg":"up in 20.5s","phase":"cp1/lab","time":"2026-11-27T07:32:10.6Z"}
{"result":{"ok":true,"nodes":[{"name":"cp1","role":"control-plane","address":"10.89.30.10","took":"20.5s"}]}}
`
	up, err := parseLabUp([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if err := up.missing(); err != nil {
		t.Fatal(err)
	}
	if d := (clusterRun{labUp: up}).span(firstNode, stageStarted, firstNode, stageDone); d != 17500*time.Millisecond {
		t.Errorf("kubeadm init took %v, want 17.5s", d)
	}
	backwards, err := parseLabUp([]byte(strings.Replace(out, "07:31:53Z", "07:32:11Z", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := backwards.missing(); err == nil {
		t.Error("kubeadm returning before its start: no error")
	}
}

// TestParseLabUpRefuses: a stream that lacks a stage the report needs,
// or whose result failed, or that holds a line that is no JSON, fails.
func TestParseLabUpRefuses(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 7, 31, 44, 0, time.UTC)
	full := string(sampleOutput(t, t0))
	for name, out := range map[string]string{
		"no Node Ready":     strings.ReplaceAll(full, "Node w1 is Ready", "Node w1 is late"),
		"no kubeadm return": strings.ReplaceAll(full, "kubeadm join returned", "kubeadm join goes on"),
		"failed result":     strings.ReplaceAll(full, `"ok":true`, `"ok":false`),
	} {
		up, err := parseLabUp([]byte(out))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if up.missing() == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := parseLabUp([]byte("[lab] not JSON\n")); err == nil {
		t.Error("a line that is no JSON: no error")
	}
}

// TestMachineCgroup: a process is the machine's when its cgroup is the
// machine's or below it in a hierarchy, a container's included, and not
// when it is another machine's whose name begins the same.
func TestMachineCgroup(t *testing.T) {
	const cg = "/kubeboot-machines/cp1-1a2b3c4d"
	for file, want := range map[string]bool{
		"12:cpu,cpuacct:/kubeboot-machines/cp1-1a2b3c4d/kubepods.slice/kubepods-burstable.slice/cri-containerd-ab.scope\n1:name=systemd:/x\n": true,
		"1:name=systemd:/kubeboot-machines/cp1-1a2b3c4d\n":        true,
		"4:memory:/kubeboot-machines/cp1-1a2b3c4d0/kubepods\n":    false,
		"0::/user.slice\n4:memory:/kubeboot-machines/cp2-99/pods": false,
	} {
		if got := inCgroup([]byte(file), cg); got != want {
			t.Errorf("inCgroup(%q) = %t, want %t", file, got, want)
		}
	}
	for comm, want := range map[string]bool{"kube-controller": true, "kube-apiserver": true, "etcd": true, "kubelet": false, "kube-proxy": false} {
		if got := isComponent(comm); got != want {
			t.Errorf("isComponent(%q) = %t, want %t", comm, got, want)
		}
	}
}

// TestMonotonicToTime: CLOCK_MONOTONIC's now is the wall clock's now.
func TestMonotonicToTime(t *testing.T) {
	now := time.Now()
	mono, err := monotonicNow()
	if err != nil {
		t.Fatal(err)
	}
	got, err := monotonicToTime(mono)
	if err != nil {
		t.Fatal(err)
	}
	if d := got.Sub(now); d < 0 || d > 100*time.Millisecond {
		t.Errorf("monotonicToTime(now) is %v from now", d)
	}
}
