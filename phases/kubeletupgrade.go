package phases

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kubeboot/kubeboot/internal/workflow"
)

// maxKubeletMinorsBehind is how many minor versions a kubelet may be
// older than the API server, as the Kubernetes version skew policy says.
const maxKubeletMinorsBehind = 3

// SystemdKubelet says whether systemd runs this node's kubelet: systemd is
// the init system and kubelet.service is active.
func SystemdKubelet(ctx context.Context, s *workflow.Run) bool {
	if _, err := os.Stat(s.Files.HostPath(SystemdRunDir)); err != nil {
		return false
	}
	out, err := s.System.Systemctl(ctx, "is-active", "kubelet")
	return err == nil && strings.TrimSpace(string(out)) == "active"
}

// KubeletRelease is the release of the kubelet binary on the PATH, the
// one kubelet.service runs at its next start: an operator installs it
// with the node's packages before upgrading the node. node is the
// kubelet's Node, or nil: when the kubelet that last reported its status
// runs that very binary (see reportedRelease), the release is the one it
// reported. Otherwise the binary is asked, which starts it: that costs
// more than the rest of an upgrade with nothing to change.
func KubeletRelease(ctx context.Context, s *workflow.Run, node *corev1.Node) (*version.Version, error) {
	path, err := s.System.LookPath("kubelet")
	if err != nil {
		return nil, fmt.Errorf("find the kubelet: %w: install it (its package also ships kubelet.service)", err)
	}
	if v, ok := reportedRelease(s.System, path, node); ok {
		return v, nil
	}
	out, err := s.System.Version(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("%s --version: %w", path, err)
	}
	fields := strings.Fields(out)
	if len(fields) != 2 || fields[0] != "Kubernetes" {
		return nil, fmt.Errorf("%s --version printed %q, not \"Kubernetes vX.Y.Z\"", path, strings.TrimSpace(out))
	}
	v, err := version.ParseSemantic(fields[1])
	if err != nil {
		return nil, fmt.Errorf("%s --version: %w", path, err)
	}
	return v, nil
}

// reportedRelease is the kubelet release node's status reports, when the
// kubelet that reported it runs the file at path: a process runs that
// file, and node's Ready condition was reported after it started (the
// kubelet reports its status as soon as it starts, and at least every few
// minutes after). The heartbeat is kept to the second, rounded down, so
// a report in the same second as the start does not count.
func reportedRelease(sys workflow.System, path string, node *corev1.Node) (*version.Version, bool) {
	if node == nil || sys.RunningSince == nil {
		return nil, false
	}
	started, ok := sys.RunningSince(path)
	if !ok {
		return nil, false
	}
	for _, c := range node.Status.Conditions {
		if c.Type != corev1.NodeReady || !c.LastHeartbeatTime.After(started) {
			continue
		}
		v, err := version.ParseSemantic(node.Status.NodeInfo.KubeletVersion)
		return v, err == nil
	}
	return nil, false
}

// CheckKubeletSkew refuses a kubelet of release kubelet, named by which
// (such as "the kubelet on the PATH"), beside an API server of release
// apiserver (the oldest the kubelet may talk to, named by what): the skew
// policy wants the kubelet never newer than the API server's minor version
// and at most three minor versions older.
func CheckKubeletSkew(which string, kubelet *version.Version, what string, apiserver *version.Version) error {
	k, a := kubelet, apiserver
	switch {
	case k.Major() != a.Major() || k.Minor() > a.Minor():
		return fmt.Errorf("%s is v%s, newer than %s (v%s): a kubelet is never newer than the API server; upgrade the control plane first, or install the kubelet of v%d.%d",
			which, kubelet, what, apiserver, a.Major(), a.Minor())
	case k.Minor()+maxKubeletMinorsBehind < a.Minor():
		return fmt.Errorf("%s is v%s, more than %d minor versions older than %s (v%s): install the kubelet of v%d.%d or later",
			which, kubelet, maxKubeletMinorsBehind, what, apiserver, a.Major(), a.Minor()-maxKubeletMinorsBehind)
	}
	return nil
}

// Kubelet is the node's kubelet as an upgrade finds it before changing
// anything (ReadKubelet), which UpgradeKubelet moves at the upgrade's
// end: the upgrade in between neither restarts the kubelet nor installs
// its binary, so what was read still holds, and is not read again.
type Kubelet struct {
	// Systemd says whether kubelet.service runs the kubelet; when it does
	// not, the other fields are unset.
	Systemd bool
	// Node is the kubelet's Node, nil when the API server did not give it.
	Node *corev1.Node
	// Release is the release of the kubelet binary on the PATH (see
	// KubeletRelease).
	Release *version.Version
}

// ReadKubelet reads the node's kubelet: whether systemd runs it, its Node
// (named node; client reads it) and its binary's release.
func ReadKubelet(ctx context.Context, s *workflow.Run, client kubernetes.Interface, node string) (Kubelet, error) {
	// The Node is read while systemctl answers, each a few milliseconds,
	// from the API server's watch cache; it only spares asking the binary
	// (see KubeletRelease): without it, the binary is asked.
	read := make(chan *corev1.Node, 1)
	go func() {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{ResourceVersion: "0"})
		if err != nil {
			n = nil
		}
		read <- n
	}()
	systemd := SystemdKubelet(ctx, s)
	n := <-read // no request outlives the call
	if !systemd {
		return Kubelet{}, nil
	}
	release, err := KubeletRelease(ctx, s, n)
	if err != nil {
		return Kubelet{}, err
	}
	return Kubelet{Systemd: true, Node: n, Release: release}, nil
}

// UpgradeKubelet moves the node's kubelet, k as ReadKubelet read it
// before the upgrade, to the binary on the PATH and the configuration in
// configFile: when its Node reports another release than the binary's,
// or configFile was written in this run, it restarts kubelet.service and
// waits, within timeout, until the Node reports the binary's release and
// is Ready with a heartbeat of the new kubelet. client reads the Node.
// Beside a kubelet that systemd does not run (a node without systemd), it
// says how to finish and changes nothing.
func UpgradeKubelet(ctx context.Context, s *workflow.Run, client kubernetes.Interface, k Kubelet, node, configFile string, timeout time.Duration) error {
	if !k.Systemd {
		s.Report.Warnf("kubelet.service does not run this node's kubelet: restart the kubelet yourself, once the new release's binary is installed, to load it and %s", configFile)
		return nil
	}
	n := k.Node
	if n == nil {
		var err error
		if n, err = client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("get Node %s: %w", node, err)
		}
	}
	want := "v" + k.Release.String()
	written := slices.Contains(s.Files.Changes().Written, configFile)
	if running := n.Status.NodeInfo.KubeletVersion; running == want && !written {
		s.Report.Infof("the kubelet runs %s, its binary's release, and %s is unchanged: left running", running, configFile)
		return nil
	}
	restarted := time.Now()
	if err := systemctl(ctx, s.System, "restart", "kubelet"); err != nil {
		return err
	}
	why := ""
	if written {
		why = ", with the new " + configFile
	}
	s.Report.Infof("restarted kubelet.service: %s (was %s)%s", want, n.Status.NodeInfo.KubeletVersion, why)
	var last string
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = restartedKubelet(n, want, restarted)
		return last == "", nil
	})
	if err != nil {
		return fmt.Errorf("wait for Node %s to report the kubelet %s after its restart: %s (see `journalctl -u kubelet`)", node, want, last)
	}
	s.Report.Infof("Node %s is Ready with the kubelet %s", node, want)
	return nil
}

// restartedKubelet says why n does not yet show a kubelet of release want
// started at restarted: "" once it reports that release and is Ready with
// a heartbeat since then.
func restartedKubelet(n *corev1.Node, want string, restarted time.Time) string {
	if got := n.Status.NodeInfo.KubeletVersion; got != want {
		return "it reports " + got
	}
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		switch {
		case c.Status != corev1.ConditionTrue:
			return fmt.Sprintf("Ready is %s (%s)", c.Status, c.Message)
		case c.LastHeartbeatTime.Before(&metav1.Time{Time: restarted.Truncate(time.Second)}):
			return "no heartbeat since the restart"
		}
		return ""
	}
	return "it has no Ready condition"
}
