package lab

import (
	"context"
	"os"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// clockTick is the length of a /proc clock tick (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// Container stats come from /proc/<pid>/stat of a container's main process:
// its CPU time and resident memory. Child processes are not counted, and
// there are no cgroups to ask. The writable layer is reported empty on the
// bin dir's filesystem, the one ImageFsInfo reports.

// containerStats describes c, with r.mu held.
func (r *Runtime) containerStats(c *container) *runtimeapi.ContainerStats {
	now := time.Now().UnixNano()
	var cpuNanos, rssBytes uint64
	if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
		if info, err := readProc(c.PID); err == nil && info.startTicks == c.StartTicks {
			cpuNanos = info.cpuTicks * uint64(clockTick)
			rssBytes = info.rssPages * uint64(os.Getpagesize())
		}
	}
	return &runtimeapi.ContainerStats{
		Attributes: &runtimeapi.ContainerAttributes{
			Id:          c.ID,
			Metadata:    c.Config.GetMetadata(),
			Labels:      c.Config.GetLabels(),
			Annotations: c.Config.GetAnnotations(),
		},
		Cpu: &runtimeapi.CpuUsage{Timestamp: now, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: cpuNanos}},
		Memory: &runtimeapi.MemoryUsage{
			Timestamp:       now,
			WorkingSetBytes: &runtimeapi.UInt64Value{Value: rssBytes},
			UsageBytes:      &runtimeapi.UInt64Value{Value: rssBytes},
			RssBytes:        &runtimeapi.UInt64Value{Value: rssBytes},
		},
		WritableLayer: &runtimeapi.FilesystemUsage{
			Timestamp:  now,
			FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: r.binDir},
			UsedBytes:  &runtimeapi.UInt64Value{},
			InodesUsed: &runtimeapi.UInt64Value{},
		},
	}
}

// ContainerStats reports one container's usage.
func (s runtimeService) ContainerStats(_ context.Context, req *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := lookup(s.containers, req.GetContainerId())
	if !ok {
		return nil, notFound("container", req.GetContainerId())
	}
	return &runtimeapi.ContainerStatsResponse{Stats: s.containerStats(c)}, nil
}

// ListContainerStats reports the usage of the running containers matching
// the filter, like other runtimes, which only report live containers.
func (s runtimeService) ListContainerStats(_ context.Context, req *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	f := req.GetFilter()
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &runtimeapi.ListContainerStatsResponse{}
	for _, c := range s.containers {
		if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING ||
			!strings.HasPrefix(c.ID, f.GetId()) ||
			!strings.HasPrefix(c.SandboxID, f.GetPodSandboxId()) ||
			!matchLabels(c.Config.GetLabels(), f.GetLabelSelector()) {
			continue
		}
		resp.Stats = append(resp.Stats, s.containerStats(c))
	}
	return resp, nil
}

// podSandboxStats sums the usage of a sandbox's running containers, with
// r.mu held. The sandbox itself has no process.
func (r *Runtime) podSandboxStats(sb *sandbox) *runtimeapi.PodSandboxStats {
	now := time.Now().UnixNano()
	var cpuNanos, rssBytes, processes uint64
	var containers []*runtimeapi.ContainerStats
	for _, c := range r.containers {
		if c.SandboxID != sb.ID || c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		cs := r.containerStats(c)
		containers = append(containers, cs)
		cpuNanos += cs.Cpu.UsageCoreNanoSeconds.Value
		rssBytes += cs.Memory.WorkingSetBytes.Value
		processes++
	}
	return &runtimeapi.PodSandboxStats{
		Attributes: &runtimeapi.PodSandboxAttributes{
			Id:          sb.ID,
			Metadata:    sb.Config.GetMetadata(),
			Labels:      sb.Config.GetLabels(),
			Annotations: sb.Config.GetAnnotations(),
		},
		Linux: &runtimeapi.LinuxPodSandboxStats{
			Cpu: &runtimeapi.CpuUsage{Timestamp: now, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: cpuNanos}},
			Memory: &runtimeapi.MemoryUsage{
				Timestamp:       now,
				WorkingSetBytes: &runtimeapi.UInt64Value{Value: rssBytes},
				UsageBytes:      &runtimeapi.UInt64Value{Value: rssBytes},
				RssBytes:        &runtimeapi.UInt64Value{Value: rssBytes},
			},
			Process:    &runtimeapi.ProcessUsage{Timestamp: now, ProcessCount: &runtimeapi.UInt64Value{Value: processes}},
			Containers: containers,
		},
	}
}

// PodSandboxStats reports one sandbox's usage.
func (s runtimeService) PodSandboxStats(_ context.Context, req *runtimeapi.PodSandboxStatsRequest) (*runtimeapi.PodSandboxStatsResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := lookup(s.sandboxes, req.GetPodSandboxId())
	if !ok {
		return nil, notFound("pod sandbox", req.GetPodSandboxId())
	}
	return &runtimeapi.PodSandboxStatsResponse{Stats: s.podSandboxStats(sb)}, nil
}

// ListPodSandboxStats reports the usage of the ready sandboxes matching the
// filter.
func (s runtimeService) ListPodSandboxStats(_ context.Context, req *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	f := req.GetFilter()
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &runtimeapi.ListPodSandboxStatsResponse{}
	for _, sb := range s.sandboxes {
		if sb.State != runtimeapi.PodSandboxState_SANDBOX_READY ||
			!strings.HasPrefix(sb.ID, f.GetId()) ||
			!matchLabels(sb.Config.GetLabels(), f.GetLabelSelector()) {
			continue
		}
		resp.Stats = append(resp.Stats, s.podSandboxStats(sb))
	}
	return resp, nil
}
