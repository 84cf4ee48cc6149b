package phases_test

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
)

// preflightOn is a quiet node on 127.0.0.1 with free ports, whose files
// (and runtime socket) live under a temp root, and whose output is returned.
func preflightOn(t *testing.T) (*phases.Node, *bytes.Buffer) {
	t.Helper()
	s := phasestest.NewNode(t, t.TempDir(), config.DefaultKubernetesVersion)
	s.Config.Node.AdvertiseAddress = "127.0.0.1"
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Config.APIServer.BindPort = int32(l.Addr().(*net.TCPAddr).Port)
	_ = l.Close()
	s.Config.Kubelet.ContainerRuntimeEndpoint = "unix:///run/test-cri.sock"
	// This host's own checks are hostchecks_test.go's, the binary of
	// kubeboot's pods (phasestest.Kubeboot, which this host may lack)
	// preflight_test.go's.
	hostChecks := []string{"filecontent--proc-sys-net-ipv4-ip_forward", "swap", "cgroupv1", "kernelversion", "fileexisting-kubelet", "cri", "kubebootbinary"}
	s.Options.IgnorePreflightErrors = append([]string{"port-2379", "port-2380", "port-2381", "port-10257", "port-10259", "port-10270", "isprivilegeduser"}, hostChecks...)
	var out bytes.Buffer
	s.Report = output.NewReporter(&out, false)
	return s, &out
}

func TestPreflightNamesMissingImages(t *testing.T) {
	s, _ := preflightOn(t)
	phasestest.ServeImages(t, s.Files.HostPath("/run/test-cri.sock"), "etcd", "kube-apiserver", "kube-controller-manager", "pause", "kube-proxy", "coredns", "flannel", "flannel-cni-plugin")
	err := phases.Preflight.Run(context.Background(), s)
	if err == nil || !strings.Contains(err.Error(), "ImagePull") {
		t.Fatalf("preflight with an image missing: %v", err)
	}

	s.Options.IgnorePreflightErrors = append(s.Options.IgnorePreflightErrors, "imagepull")
	var out bytes.Buffer
	s.Report = output.NewReporter(&out, false)
	if err := phases.Preflight.Run(context.Background(), s); err != nil {
		t.Fatalf("preflight with ImagePull ignored: %v", err)
	}
	want := "lacks 1 image(s): registry.k8s.io/kube-scheduler:" + config.DefaultKubernetesVersion + ": pull them with `kubeboot images pull`"
	if !strings.Contains(out.String(), want) {
		t.Errorf("the warning does not name the missing image (want %q):\n%s", want, out.String())
	}
}

func TestPreflightPassesWithEveryImage(t *testing.T) {
	s, out := preflightOn(t)
	phasestest.ServeImages(t, s.Files.HostPath("/run/test-cri.sock"), "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "pause", "kube-proxy", "coredns", "flannel", "flannel-cni-plugin")
	if err := phases.Preflight.Run(context.Background(), s); err != nil {
		t.Fatalf("preflight with every image present: %v\n%s", err, out.String())
	}
}

func TestPreflightWithoutRuntimeWarns(t *testing.T) {
	s, out := preflightOn(t)
	if err := phases.Preflight.Run(context.Background(), s); err != nil {
		t.Fatalf("preflight without a runtime: %v", err)
	}
	if !strings.Contains(out.String(), "WARNING: ImagePull: cannot check the images") {
		t.Errorf("no warning about the missing runtime:\n%s", out.String())
	}
}
