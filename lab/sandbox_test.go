package lab_test

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestSandboxLifecycle(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	id, _ := e.runSandbox("etcd")

	resp, err := e.rs.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		t.Fatal(err)
	}
	st := resp.Status
	if st.Id != id || st.State != runtimeapi.PodSandboxState_SANDBOX_READY || st.CreatedAt == 0 ||
		st.Metadata.GetName() != "etcd" || st.Labels["app"] != "etcd" || st.Annotations["kubernetes.io/config.source"] != "file" {
		t.Errorf("PodSandboxStatus = %v", st)
	}
	// The kubelet starts a new sandbox when the network mode differs from the pod's.
	if got := st.GetLinux().GetNamespaces().GetOptions().GetNetwork(); got != runtimeapi.NamespaceMode_NODE {
		t.Errorf("network namespace mode = %s, want NODE", got)
	}
	if net.ParseIP(st.GetNetwork().GetIp()) == nil {
		t.Errorf("sandbox IP %q is not an IP", st.GetNetwork().GetIp())
	}

	running := e.run(id, shConfig("main", "exec sleep 30"))
	pid := e.pid(running)
	if _, err := e.rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if c := e.status(running); c.State != runtimeapi.ContainerState_CONTAINER_EXITED || c.ExitCode != 137 {
		t.Errorf("after StopPodSandbox the container is %s with exit code %d, want killed (137)", c.State, c.ExitCode)
	}
	if processRunning(pid) {
		t.Errorf("pid %d still runs after StopPodSandbox", pid)
	}
	resp, err = e.rs.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil || resp.Status.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("after StopPodSandbox: %v, %v; want NOTREADY", resp.GetStatus().GetState(), err)
	}
	// Stopping again is fine: the kubelet retries.
	if _, err := e.rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Errorf("second StopPodSandbox: %v", err)
	}
	_, err = e.rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: e.create(id, shConfig("late", "true"))})
	wantCode(t, err, codes.FailedPrecondition, "not ready")

	if _, err := e.rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	_, err = e.rs.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	wantCode(t, err, codes.NotFound)
	_, err = e.rs.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: running})
	wantCode(t, err, codes.NotFound)
	if _, err := e.rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Errorf("RemovePodSandbox of a removed sandbox: %v, want success", err)
	}
	_, err = e.rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
	wantCode(t, err, codes.NotFound)
}

func TestListPodSandboxFilters(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a, _ := e.runSandbox("a")
	b, _ := e.runSandbox("b")
	if _, err := e.rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: b}); err != nil {
		t.Fatal(err)
	}
	ready := runtimeapi.PodSandboxState_SANDBOX_READY
	notReady := runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	for _, tc := range []struct {
		name   string
		filter *runtimeapi.PodSandboxFilter
		want   []string
	}{
		{"no filter", nil, []string{a, b}},
		{"id", &runtimeapi.PodSandboxFilter{Id: b}, []string{b}},
		{"id prefix", &runtimeapi.PodSandboxFilter{Id: a[:13]}, []string{a}},
		{"ready", &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: ready}}, []string{a}},
		{"not ready", &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: notReady}}, []string{b}},
		{"pod uid label", &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"io.kubernetes.pod.uid": "uid-b"}}, []string{b}},
		{"labels and state", &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "a"}, State: &runtimeapi.PodSandboxStateValue{State: notReady}}, nil},
		{"unknown label", &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "c"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := e.rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: tc.filter})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, sb := range resp.Items {
				got = append(got, sb.Id)
			}
			if len(got) != len(tc.want) || (len(got) > 0 && !equalIDs(got, tc.want)) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func equalIDs(a, b []string) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestRunPodSandboxRefusals(t *testing.T) {
	e := newEnv(t)
	podNetwork := sandboxConfig("pod-network", e.logDir)
	podNetwork.Linux.SecurityContext.NamespaceOptions.Network = runtimeapi.NamespaceMode_POD
	noLinux := sandboxConfig("no-linux", e.logDir)
	noLinux.Linux = nil
	for _, tc := range []struct {
		name string
		req  *runtimeapi.RunPodSandboxRequest
		want string
	}{
		{"pod network", &runtimeapi.RunPodSandboxRequest{Config: podNetwork}, "only runs hostNetwork pods"},
		{"no namespace options", &runtimeapi.RunPodSandboxRequest{Config: noLinux}, "only runs hostNetwork pods"},
		{"runtime handler", &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("h", e.logDir), RuntimeHandler: "runc"}, `unknown runtime handler "runc"`},
		{"no metadata", &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{}}, "metadata is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.rs.RunPodSandbox(context.Background(), tc.req)
			wantCode(t, err, codes.InvalidArgument, tc.want)
		})
	}
	resp, err := e.rs.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{})
	if err != nil || len(resp.Items) != 0 {
		t.Errorf("refused sandboxes were recorded: %v, %v", resp.GetItems(), err)
	}
}
