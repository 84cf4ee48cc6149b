package lab

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/kubeboot/kubeboot/files"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"
)

// kubeadm's fixed paths on a node, which the lab overlays with the node's
// own directories.
const (
	KubeadmConfigDir   = "/etc/kubernetes"
	KubeadmKubeletDir  = "/var/lib/kubelet"
	kubeadmFlagsFile   = KubeadmKubeletDir + "/kubeadm-flags.env"
	kubeadmKubeletConf = KubeadmKubeletDir + "/config.yaml"
	kubeadmBootstrap   = KubeadmConfigDir + "/bootstrap-kubelet.conf"
	kubeadmKubeletKC   = KubeadmConfigDir + "/kubelet.conf"
)

// overlaid are the host directories a kubeadm node sees through an overlay
// whose writes land in the node's dir: kubeadm writes /etc/kubernetes and
// /var/lib/kubelet, and the kubelet its device plugins' sockets under
// /var/lib/kubelet whatever its root dir.
var overlaid = []string{"/etc", "/var/lib"}

// KubeadmNode is a lab node that joins with the real kubeadm: its dir, and
// the kubeadm binary.
type KubeadmNode struct {
	// Dir is the node's lab dir; the overlays' upper dirs live in it.
	Dir string
	// Kubeadm is the kubeadm binary.
	Kubeadm string
	// Name and Address are the node's, which Isolate adds to its
	// /etc/hosts.
	Name, Address string
}

// Isolate gives this process's own mount namespace, which lab up
// --cluster created for it (`unshare --mount`), the node's view of the
// host: /etc and /var/lib overlaid, so that what kubeadm and the kubelet
// write there lands in the node's dir and nothing of the host's changes.
// The node's /etc/hosts names the node, as a real node's resolves its own
// name: kubeadm's preflight looks the name up, and so does the kubelet
// for its address without --node-ip, and a lab node has no DNS server to
// ask (each lookup would wait 10 s for one). It refuses to run in the
// host's mount namespace.
func (k KubeadmNode) Isolate() error {
	// The parent is lab up --cluster's nsenter, or a shell, in the host's.
	own, err1 := os.Readlink("/proc/self/ns/mnt")
	parent, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", os.Getppid()))
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("read the mount namespaces: %w", err)
	}
	if own == parent {
		return errors.New("--kubeadm-join overlays /etc and /var/lib, so it runs only in a mount namespace of its own, as `kubeboot lab up --cluster` starts it (`unshare --mount`)")
	}
	for _, dir := range overlaid {
		name := strings.ReplaceAll(strings.Trim(dir, "/"), "/", "-")
		upper, work := filepath.Join(k.Dir, "overlay", name), filepath.Join(k.Dir, "overlay", name+".work")
		for _, d := range []string{upper, work} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				return err
			}
		}
		opts := "lowerdir=" + dir + ",upperdir=" + upper + ",workdir=" + work
		if err := unix.Mount("overlay", dir, "overlay", 0, opts); err != nil {
			return fmt.Errorf("overlay %s with %s: %w", dir, upper, err)
		}
	}
	if k.Name == "" {
		return nil
	}
	hosts, err := os.ReadFile("/etc/hosts")
	if err != nil {
		return err
	}
	return (&files.AtomicWriter{}).WriteFile("/etc/hosts", append(hosts, fmt.Sprintf("%s %s\n", k.Address, k.Name)...), 0o644)
}

// PatchesDir is the directory of kubeadm's patches for the node (see
// WritePatches): `kubeadm join --patches`, or init's patches.directory.
func (k KubeadmNode) PatchesDir() string { return filepath.Join(k.Dir, "kubeadm-patches") }

// WritePatches writes kubeadm's patch of the kubelet's configuration into
// PatchesDir: the volume plugins and pod logs go to the node's dir, not
// the host's /usr/libexec and /var/log; node allocatable is enforced on
// nothing, as the lab's kubelets run without QoS cgroups (kubeadm reads
// the cluster's empty enforceNodeAllocatable as unset, which means "pods").
func (k KubeadmNode) WritePatches() error {
	patch := fmt.Sprintf("volumePluginDir: %s\npodLogsDir: %s\nenforceNodeAllocatable: [none]\n",
		filepath.Join(k.Dir, "volume-plugins"), filepath.Join(k.Dir, "pod-logs"))
	if err := os.MkdirAll(k.PatchesDir(), 0o700); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(k.PatchesDir(), "kubeletconfiguration+merge.yaml"), []byte(patch))
}

// kubeletFilesPoll is how often KubeletArgs looks for kubeadm's files:
// often enough that the kubelet starts about when systemd would start it.
const kubeletFilesPoll = 10 * time.Millisecond

// KubeletArgs waits until kubeadm (init or join) has written what the
// kubelet reads (its configuration, a kubeconfig: join's bootstrap one or
// init's kubelet.conf, and last its flags, as kubeadm's kubelet-start has
// them before it starts kubelet.service) and returns the kubelet's
// command line as kubeadm's systemd drop-in makes it. A kubeadm that
// exits first fails it, with its log's tail.
func (k KubeadmNode) KubeletArgs(ctx context.Context, kubeadm *exec.Cmd, log string, exited <-chan error) ([]string, error) {
	exists := func(f string) bool { _, err := os.Stat(f); return err == nil }
	var flags []string
	err := wait.PollUntilContextTimeout(ctx, kubeletFilesPoll, 5*time.Minute, true, func(context.Context) (bool, error) {
		select {
		case err := <-exited:
			return false, fmt.Errorf("%s exited before it started the kubelet: %w:\n%s", strings.Join(kubeadm.Args[:2], " "), err, tail(log, 20))
		default:
		}
		kubeconfig := exists(kubeadmBootstrap) || exists(kubeadmKubeletKC)
		if !exists(kubeadmKubeletConf) || !kubeconfig {
			return false, nil
		}
		env, err := os.ReadFile(kubeadmFlagsFile)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		var complete bool
		flags, complete = kubeadmFlags(string(env))
		return complete, nil
	})
	if err != nil {
		return nil, fmt.Errorf("wait for %s's kubelet files: %w", strings.Join(kubeadm.Args, " "), err)
	}
	args := []string{
		"--bootstrap-kubeconfig=" + kubeadmBootstrap,
		"--kubeconfig=" + kubeadmKubeletKC,
		"--config=" + kubeadmKubeletConf,
	}
	return append(args, flags...), nil
}

// kubeadmFlags are the flags of kubeadm-flags.env's KUBELET_KUBEADM_ARGS
// line, KUBELET_KUBEADM_ARGS="--a=b --c=d" and its newline. complete is
// false until that whole line is there: kubeadm writes the file in place,
// so it may be read empty or cut short, and a kubelet started without
// kubeadm's --hostname-override registers the machine's hostname instead.
func kubeadmFlags(env string) (flags []string, complete bool) {
	for line := range strings.Lines(env) {
		value, found := strings.CutPrefix(line, `KUBELET_KUBEADM_ARGS="`)
		if !found {
			continue
		}
		value, complete = strings.CutSuffix(value, "\"\n")
		if !complete {
			return nil, false
		}
		return strings.Fields(value), true
	}
	return nil, false
}

// tail is the last n lines of the file at path.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
