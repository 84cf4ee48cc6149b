package lab_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestContainerLifecycle(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sb, sbCfg := e.runSandbox("pod")
	cfg := &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: "sleeper", Attempt: 2},
		Image:       &runtimeapi.ImageSpec{Image: "sha256:will-be-replaced", UserSpecifiedImage: "registry.k8s.io/sleep:1"},
		Args:        []string{"30"}, // no command: the image's binary runs
		LogPath:     "sleeper/2.log",
		Labels:      map[string]string{"io.kubernetes.container.name": "sleeper"},
		Annotations: map[string]string{"io.kubernetes.container.hash": "abc", "io.kubernetes.container.restartCount": "2"},
	}
	// The kubelet creates containers with the image ID it pulled.
	pulled, err := e.is.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "registry.k8s.io/sleep:1"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Image.Image = pulled.ImageRef

	id := e.create(sb, cfg)
	st := e.status(id)
	if st.State != runtimeapi.ContainerState_CONTAINER_CREATED || st.CreatedAt == 0 || st.StartedAt != 0 {
		t.Errorf("after create: %v", st)
	}
	before := time.Now().UnixNano()
	if _, err := e.rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	st = e.status(id)
	// The kubelet reads its bookkeeping back from labels and annotations.
	if st.State != runtimeapi.ContainerState_CONTAINER_RUNNING || st.StartedAt < before || st.StartedAt > time.Now().UnixNano() ||
		st.Metadata.GetAttempt() != 2 || st.Annotations["io.kubernetes.container.hash"] != "abc" ||
		st.Labels["io.kubernetes.container.name"] != "sleeper" ||
		st.Image.GetImage() != "registry.k8s.io/sleep:1" || st.ImageRef != pulled.ImageRef || st.ImageId != pulled.ImageRef ||
		st.LogPath != filepath.Join(sbCfg.LogDirectory, "sleeper/2.log") {
		t.Errorf("after start: %v", st)
	}
	_, err = e.rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
	wantCode(t, err, codes.FailedPrecondition, "not created")

	pid := e.pid(id)
	stopped := time.Now()
	if _, err := e.rs.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 10}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(stopped); d > 5*time.Second {
		t.Errorf("StopContainer took %s; sleep should have exited on SIGTERM", d)
	}
	st = e.status(id)
	if st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 143 || st.Reason != "Error" ||
		st.FinishedAt < st.StartedAt || st.FinishedAt > time.Now().UnixNano() {
		t.Errorf("after stop: state %s exit %d reason %q started %d finished %d; want exited by SIGTERM (143)",
			st.State, st.ExitCode, st.Reason, st.StartedAt, st.FinishedAt)
	}
	if processRunning(pid) {
		t.Errorf("pid %d still runs", pid)
	}
	// Stopping a stopped container succeeds.
	if _, err := e.rs.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 1}); err != nil {
		t.Errorf("second StopContainer: %v", err)
	}
	if _, err := e.rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	_, err = e.rs.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	wantCode(t, err, codes.NotFound)
	if _, err := e.rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Errorf("RemoveContainer of a removed container: %v, want success", err)
	}
	_, err = e.rs.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id})
	wantCode(t, err, codes.NotFound)
}

func TestStopKillsAfterTimeout(t *testing.T) {
	e := newEnv(t)
	sb, _ := e.runSandbox("pod")
	id := e.run(sb, shConfig("stubborn", "trap '' TERM; sleep 30; true"))
	pid := e.pid(id)
	e.waitIgnoresTERM(pid)

	start := time.Now()
	if _, err := e.rs.StopContainer(context.Background(), &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 1}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < time.Second || d > 5*time.Second {
		t.Errorf("StopContainer took %s, want the 1s timeout and then SIGKILL", d)
	}
	if st := e.status(id); st.ExitCode != 137 || st.Reason != "Error" {
		t.Errorf("exit code %d reason %q, want 137 Error", st.ExitCode, st.Reason)
	}
	if !groupGone(pid) {
		t.Errorf("the sleep child in process group %d survived", pid)
	}
}

func TestExitCodes(t *testing.T) {
	e := newEnv(t)
	sb, _ := e.runSandbox("pod")
	for _, tc := range []struct {
		script string
		code   int32
		reason string
	}{
		{"exit 0", 0, "Completed"},
		{"exit 3", 3, "Error"},
		{"kill -KILL $$", 137, "Error"},
		{"kill -TERM $$", 143, "Error"},
	} {
		t.Run(tc.script, func(t *testing.T) {
			st := e.waitExited(e.run(sb, shConfig("c", tc.script)))
			if st.ExitCode != tc.code || st.Reason != tc.reason || st.FinishedAt < st.StartedAt {
				t.Errorf("exit code %d reason %q (started %d, finished %d), want %d %q",
					st.ExitCode, st.Reason, st.StartedAt, st.FinishedAt, tc.code, tc.reason)
			}
		})
	}
}

func TestStartErrorIsReported(t *testing.T) {
	e := newEnv(t)
	sb, _ := e.runSandbox("pod")
	cfg := shConfig("c", "true")
	cfg.WorkingDir = filepath.Join(e.dir, "missing")
	id := e.create(sb, cfg)
	_, err := e.rs.StartContainer(context.Background(), &runtimeapi.StartContainerRequest{ContainerId: id})
	if err == nil {
		t.Fatal("StartContainer in a missing working dir succeeded")
	}
	if st := e.status(id); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 128 || st.Reason != "StartError" || st.Message == "" {
		t.Errorf("status after a failed start = %v, want exited 128 StartError with a message", st)
	}
}

func TestCreateContainerErrors(t *testing.T) {
	e := newEnv(t)
	sb, _ := e.runSandbox("pod")
	hostDir := filepath.Join(e.dir, "data")
	if err := os.Mkdir(hostDir, 0o755); err != nil {
		t.Fatal(err)
	}
	missingImage := shConfig("c", "true")
	missingImage.Image.Image = "registry.k8s.io/kube-apiserver:v1.36.3"
	missingImage.Command = nil
	missingCommand := shConfig("c", "true")
	missingCommand.Command = []string{"no-such-command-kubeboot"}
	withMounts := func(ms ...*runtimeapi.Mount) *runtimeapi.ContainerConfig {
		cfg := shConfig("c", "true")
		cfg.Mounts = ms
		return cfg
	}
	for _, tc := range []struct {
		name  string
		cfg   *runtimeapi.ContainerConfig
		code  codes.Code
		parts []string
	}{
		{"missing binary", missingImage, codes.NotFound, []string{`"kube-apiserver"`, e.binDir}},
		{"missing command", missingCommand, codes.InvalidArgument, []string{"no-such-command-kubeboot", e.binDir}},
		{"missing host path", withMounts(&runtimeapi.Mount{ContainerPath: "/nope", HostPath: filepath.Join(e.dir, "nope")}), codes.InvalidArgument, []string{filepath.Join(e.dir, "nope")}},
		{"image volume", withMounts(&runtimeapi.Mount{ContainerPath: "/tools", Image: &runtimeapi.ImageSpec{Image: "registry.k8s.io/tools:1"}}), codes.InvalidArgument, []string{"image volumes"}},
		{"remapped host path", withMounts(&runtimeapi.Mount{ContainerPath: "/var/lib/etcd", HostPath: hostDir}), codes.InvalidArgument, []string{"mountPath must equal the hostPath"}},
		{"sandbox image", &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "p"}, Image: &runtimeapi.ImageSpec{Image: "registry.k8s.io/pause:3.10"}}, codes.InvalidArgument, []string{"sandbox image"}},
		{"devices", func() *runtimeapi.ContainerConfig {
			cfg := shConfig("c", "true")
			cfg.Devices = []*runtimeapi.Device{{ContainerPath: "/dev/fuse", HostPath: "/dev/fuse"}}
			return cfg
		}(), codes.InvalidArgument, []string{"devices"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.rs.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: sb, Config: tc.cfg})
			wantCode(t, err, tc.code, tc.parts...)
		})
	}
	_, err := e.rs.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: "nope", Config: shConfig("c", "true")})
	wantCode(t, err, codes.NotFound, "pod sandbox")

	// Host paths where the process expects them, and the kubelet's own files, are fine.
	hostsFile := filepath.Join(e.dir, "etc-hosts")
	termLog := filepath.Join(e.dir, "termination-log")
	for _, f := range []string{hostsFile, termLog} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ok := withMounts(
		&runtimeapi.Mount{ContainerPath: hostDir, HostPath: hostDir, Readonly: true},
		&runtimeapi.Mount{ContainerPath: "/etc/hosts", HostPath: hostsFile},
		&runtimeapi.Mount{ContainerPath: "/dev/termination-log", HostPath: termLog},
	)
	st := e.status(e.create(sb, ok))
	if len(st.Mounts) != 3 || st.Mounts[2].HostPath != termLog {
		t.Errorf("status mounts = %v, want the three mounts (the kubelet reads the termination log through them)", st.Mounts)
	}
}

func TestCommandResolution(t *testing.T) {
	e := newEnv(t)
	sb, _ := e.runSandbox("pod")
	// A bin dir binary wins over the host's PATH.
	script := "#!/bin/sh\necho from-bin-dir\n"
	if err := os.WriteFile(filepath.Join(e.binDir, "ls"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := shConfig("ls", "")
	cfg.Command = []string{"ls"}
	st := e.waitExited(e.run(sb, cfg))
	if log := readLog(t, st.LogPath); !containsLine(log, "from-bin-dir") {
		t.Errorf("log %q: the bin dir's ls did not run", log)
	}

	// An image of a minor version runs <bin dir>/vX.Y/<name> when it is
	// there, even when the command names the binary, as manifests do.
	if err := os.MkdirAll(filepath.Join(e.binDir, "v1.35"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"kube-tool", "v1.35/kube-tool"} {
		if err := os.WriteFile(filepath.Join(e.binDir, f), []byte("#!/bin/sh\necho "+f+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for image, want := range map[string]string{"registry.k8s.io/kube-tool:v1.35.4": "v1.35/kube-tool", "registry.k8s.io/kube-tool:v1.36.3": "kube-tool"} {
		cfg = shConfig("tool", "")
		cfg.Image, cfg.Command = &runtimeapi.ImageSpec{Image: image}, []string{"kube-tool"}
		st = e.waitExited(e.run(sb, cfg))
		if log := readLog(t, st.LogPath); !containsLine(log, want) {
			t.Errorf("image %s: log %q, want the output of %s", image, log, want)
		}
	}

	// The literal env, a PATH starting with the bin dir, and nothing inherited.
	cfg = shConfig("env", `echo "FOO=$FOO PATH=$PATH HOME=$HOME"`)
	cfg.Envs = []*runtimeapi.KeyValue{{Key: "FOO", Value: []byte("bar")}}
	st = e.waitExited(e.run(sb, cfg))
	want := "FOO=bar PATH=" + e.binDir + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME="
	if log := readLog(t, st.LogPath); !containsLine(log, want) {
		t.Errorf("log %q lacks %q", log, want)
	}
}

func TestListContainersFilters(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sbA, _ := e.runSandbox("a")
	sbB, _ := e.runSandbox("b")
	a1 := e.run(sbA, shConfig("a1", "exec sleep 30"))
	a2 := e.create(sbA, shConfig("a2", "true"))
	b1 := e.run(sbB, shConfig("b1", "exit 0"))
	e.waitExited(b1)

	running := &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}
	exited := &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_EXITED}
	for _, tc := range []struct {
		name   string
		filter *runtimeapi.ContainerFilter
		want   []string
	}{
		{"no filter", nil, []string{a1, a2, b1}},
		{"id", &runtimeapi.ContainerFilter{Id: a2}, []string{a2}},
		{"id prefix", &runtimeapi.ContainerFilter{Id: b1[:13]}, []string{b1}},
		{"running", &runtimeapi.ContainerFilter{State: running}, []string{a1}},
		{"exited", &runtimeapi.ContainerFilter{State: exited}, []string{b1}},
		{"sandbox", &runtimeapi.ContainerFilter{PodSandboxId: sbA}, []string{a1, a2}},
		{"label", &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"io.kubernetes.container.name": "a2"}}, []string{a2}},
		{"sandbox and state", &runtimeapi.ContainerFilter{PodSandboxId: sbB, State: running}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := e.rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: tc.filter})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range resp.Containers {
				got = append(got, c.Id)
				if c.Metadata == nil || c.Image.GetImage() == "" || c.ImageRef == "" || c.CreatedAt == 0 || c.Labels["io.kubernetes.container.name"] == "" {
					t.Errorf("incomplete container %v", c)
				}
			}
			if len(got) != len(tc.want) || (len(got) > 0 && !equalIDs(got, tc.want)) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestUpdateContainerResourcesAndStats(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sb, _ := e.runSandbox("pod")
	// The shell holds 4 MiB: the kernel counts a process's resident pages in
	// per-CPU batches, so a bare sleep may read as 0 bytes in one sample.
	id := e.run(sb, shConfig("c", "x=a; i=0; while [ $i -lt 22 ]; do x=$x$x; i=$((i+1)); done; sleep 30"))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st, err := e.rs.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: id})
		if err == nil && st.GetStats().GetMemory().GetWorkingSetBytes().GetValue() >= 4<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no container stats with the shell's 4 MiB after 10s: %v, %v", st, err)
		}
	}

	limits := &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 << 20, CpuShares: 512}
	if _, err := e.rs.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: limits}); err != nil {
		t.Fatal(err)
	}
	if got := e.status(id).GetResources().GetLinux(); got.GetMemoryLimitInBytes() != 64<<20 || got.GetCpuShares() != 512 {
		t.Errorf("status resources = %v, want the updated ones", got)
	}

	list, err := e.rs.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{Filter: &runtimeapi.ContainerStatsFilter{PodSandboxId: sb}})
	if err != nil || len(list.Stats) != 1 {
		t.Fatalf("ListContainerStats = %v, %v; want one", list.GetStats(), err)
	}
	one, err := e.rs.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*runtimeapi.ContainerStats{list.Stats[0], one.Stats} {
		// The kubelet dereferences these when they are set, and needs a timestamp.
		if s.GetAttributes().GetId() != id || s.GetCpu().GetTimestamp() == 0 || s.GetCpu().GetUsageCoreNanoSeconds() == nil ||
			s.GetMemory().GetWorkingSetBytes().GetValue() == 0 || s.GetWritableLayer().GetUsedBytes() == nil ||
			s.GetWritableLayer().GetFsId().GetMountpoint() != e.binDir {
			t.Errorf("container stats = %v", s)
		}
	}

	pods, err := e.rs.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{})
	if err != nil || len(pods.Stats) != 1 {
		t.Fatalf("ListPodSandboxStats = %v, %v; want one", pods.GetStats(), err)
	}
	pod, err := e.rs.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: sb})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*runtimeapi.PodSandboxStats{pods.Stats[0], pod.Stats} {
		if s.GetAttributes().GetId() != sb || len(s.GetLinux().GetContainers()) != 1 ||
			s.GetLinux().GetMemory().GetWorkingSetBytes().GetValue() == 0 || s.GetLinux().GetProcess().GetProcessCount().GetValue() != 1 {
			t.Errorf("pod sandbox stats = %v", s)
		}
	}
}

func TestRunAsUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to switch users")
	}
	e := newEnv(t)
	// The user needs to reach the bin dir's sh.
	for _, dir := range []string{filepath.Dir(e.dir), e.dir} {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sb, _ := e.runSandbox("pod")
	cfg := shConfig("nobody", `echo "$(id -u) $(id -g) $(id -G)"`)
	cfg.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
		RunAsUser:          &runtimeapi.Int64Value{Value: 65534},
		RunAsGroup:         &runtimeapi.Int64Value{Value: 65533},
		SupplementalGroups: []int64{4242},
	}}
	st := e.waitExited(e.run(sb, cfg))
	if log := readLog(t, st.LogPath); !containsLine(log, "65534 65533 65533 4242") {
		t.Errorf("log %q: want the process to run as 65534:65533 with group 4242", log)
	}

	cfg = shConfig("named", "true")
	cfg.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{RunAsUsername: "etcd"}}
	_, err := e.rs.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: sb, Config: cfg})
	wantCode(t, err, codes.InvalidArgument, "runAsUsername")
}
