package cri

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestNewer: the container whose log explains a crash is the newest one
// that ran, not the kubelet's next attempt that is only created.
func TestNewer(t *testing.T) {
	exited := &runtimeapi.Container{CreatedAt: 1, State: runtimeapi.ContainerState_CONTAINER_EXITED}
	created := &runtimeapi.Container{CreatedAt: 2, State: runtimeapi.ContainerState_CONTAINER_CREATED}
	running := &runtimeapi.Container{CreatedAt: 3, State: runtimeapi.ContainerState_CONTAINER_RUNNING}
	for _, tc := range []struct {
		a, b *runtimeapi.Container
		want bool
	}{
		{exited, created, true},
		{created, exited, false},
		{running, exited, true},
		{exited, running, false},
	} {
		if got := newer(tc.a, tc.b); got != tc.want {
			t.Errorf("newer(created at %d, created at %d) = %v, want %v", tc.a.CreatedAt, tc.b.CreatedAt, got, tc.want)
		}
	}
}
