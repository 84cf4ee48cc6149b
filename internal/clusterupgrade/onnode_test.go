package clusterupgrade_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/clusterupgrade"
	"github.com/kubeboot/kubeboot/internal/nodepod"
)

// fakeSystemdRun runs the command after -- with the --setenv values, its
// output to the --property=StandardOutput=truncate: file, and logs its
// arguments, as systemd-run --wait does with a transient unit.
const fakeSystemdRun = `#!/bin/sh
echo "$*" >> "$(dirname "$0")/calls"
log= ; envs=
while [ "$1" != "--" ]; do
  case "$1" in
    --property=StandardOutput=truncate:*) log="${1#--property=StandardOutput=truncate:}" ;;
    --setenv=*) envs="$envs ${1#--setenv=}" ;;
  esac
  shift
done
shift
# The service manager's expansion of a unit's command: $$ is $.
n=$#
while [ $n -gt 0 ]; do
  a=$(printf '%s' "$1" | sed 's/\$\$/$/g'); shift; set -- "$@" "$a"; n=$((n-1))
done
env $envs "$@" > "$log" 2>&1
`

// fakeSystemctl says a unit is active while the file "running" exists.
const fakeSystemctl = `#!/bin/sh
echo "systemctl $*" >> "$(dirname "$0")/calls"
if [ -e "$(dirname "$0")/running" ]; then echo active; else echo inactive; fi
`

// fakeHost is a Host of fake systemd tools and a fake kubeboot in dir,
// which prints its arguments and fails when the file "fail" exists.
func fakeHost(t *testing.T) (nodepod.Host, string) {
	dir := t.TempDir()
	for name, script := range map[string]string{
		"systemd-run": fakeSystemdRun, "systemctl": fakeSystemctl,
		"kubeadm":  "#!/bin/sh\necho kubeadm \"$@\"\n",
		"kubeboot": "#!/bin/sh\necho kubeboot \"$@\"\nif [ -e \"$(dirname \"$0\")/fail\" ]; then echo 'upgrade apply: etcd did not become healthy; rolled back'; exit 1; fi\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return nodepod.Host{SystemdRun: filepath.Join(dir, "systemd-run"), Systemctl: filepath.Join(dir, "systemctl"),
		Booted: dir, Kubeboot: filepath.Join(dir, "kubeboot"), Kubeadm: filepath.Join(dir, "kubeadm"), KubeadmJoined: filepath.Join(dir, "kubeadm-flags.env"), LogDir: filepath.Join(dir, "log"), Poll: time.Millisecond}, dir
}

// TestOnNode: the install command runs with KUBERNETES_VERSION, then the
// node's kubeboot upgrade (apply on the first control-plane node, its
// file moved to the release), each a transient unit whose output is
// printed; a failure says what failed after the unit's output; a
// unit an earlier run left running is waited for; a worker kubeadm
// joined runs kubeadm upgrade node and the kubelet's restart; any other
// node without the file is refused.
func TestOnNode(t *testing.T) {
	h, dir := fakeHost(t)
	config := filepath.Join(dir, "node.yaml")
	if err := os.WriteFile(config, []byte("kind: JoinConfiguration\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := clusterupgrade.OnNode{Config: config, Version: "v1.36.3", Apply: true, ControlPlane: true,
		Install: []string{"/bin/sh", "-c", "echo installing the kubelet $KUBERNETES_VERSION"}}
	var out bytes.Buffer
	if err := o.Run(context.Background(), h, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	want := "installing the kubelet v1.36.3\nkubeboot upgrade apply --config " + config + " -o json --kubernetes-version v1.36.3\n"
	if out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), want)
	}
	calls, _ := os.ReadFile(filepath.Join(dir, "calls"))
	if !strings.Contains(string(calls), "--unit=kubeboot-upgrade-kubelet --wait --collect") || !strings.Contains(string(calls), "--setenv=KUBERNETES_VERSION=v1.36.3") ||
		!strings.Contains(string(calls), "--unit=kubeboot-upgrade-node --wait --collect") || !strings.Contains(string(calls), "the kubelet $$KUBERNETES_VERSION") {
		t.Errorf("systemd-run calls:\n%s", calls)
	}

	t.Run("a failed upgrade", func(t *testing.T) {
		if err := os.WriteFile(filepath.Join(dir, "fail"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = os.Remove(filepath.Join(dir, "fail")) }()
		worker := clusterupgrade.OnNode{Config: config, Version: "v1.36.3"}
		var out bytes.Buffer
		err := worker.Run(context.Background(), h, &out)
		if err == nil || err.Error() != "kubeboot upgrade node: kubeboot-upgrade-node failed (exit status 1); its output is above" ||
			out.String() != "kubeboot upgrade node --config "+config+" -o json\nupgrade apply: etcd did not become healthy; rolled back\n" {
			t.Errorf("err %v, output:\n%s", err, out.String())
		}
	})
	t.Run("a unit an earlier run left", func(t *testing.T) {
		running := filepath.Join(dir, "running")
		if err := os.WriteFile(running, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(50 * time.Millisecond)
			_ = os.Remove(running)
		}()
		var out bytes.Buffer
		if err := (clusterupgrade.OnNode{Config: config, Version: "v1.36.3"}).Run(context.Background(), h, &out); err != nil ||
			!strings.HasPrefix(out.String(), "waiting for kubeboot-upgrade-node, which an earlier run started, to end\nkubeboot upgrade node") {
			t.Errorf("err %v, output:\n%s", err, out.String())
		}
	})
	t.Run("a node without systemd", func(t *testing.T) {
		h := h
		h.Booted = filepath.Join(dir, "no-systemd")
		err := (clusterupgrade.OnNode{Config: config, Version: "v1.36.3"}).Run(context.Background(), h, &out)
		if err == nil || !strings.Contains(err.Error(), "this node has no systemd") || !strings.Contains(err.Error(), "run `kubeboot upgrade node` on it by hand") {
			t.Errorf("err %v", err)
		}
	})
	t.Run("a worker kubeadm joined", func(t *testing.T) {
		worker := clusterupgrade.OnNode{Config: filepath.Join(dir, "none.yaml"), Version: "v1.36.3"}
		var out bytes.Buffer
		err := worker.Run(context.Background(), h, &out)
		if err == nil || !strings.Contains(err.Error(), "nor is it a worker with kubeadm") || out.Len() != 0 {
			t.Fatalf("without kubeadm's flags file: err %v, output %q", err, out.String())
		}
		if err := os.WriteFile(h.KubeadmJoined, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(dir, "calls")); err != nil {
			t.Fatal(err)
		}
		worker.KubeadmIgnorePreflightErrors = "SystemVerification"
		if err := worker.Run(context.Background(), h, &out); err != nil || out.String() != "kubeadm upgrade node --ignore-preflight-errors=SystemVerification\nrestarted kubelet.service\n" {
			t.Fatalf("err %v, output:\n%s", err, out.String())
		}
		calls, _ := os.ReadFile(filepath.Join(dir, "calls"))
		if !strings.HasSuffix(string(calls), "systemctl daemon-reload\nsystemctl restart kubelet\n") {
			t.Errorf("calls:\n%s", calls)
		}
		cp := clusterupgrade.OnNode{Config: filepath.Join(dir, "none.yaml"), Version: "v1.36.3", ControlPlane: true}
		if err := cp.Run(context.Background(), h, &out); err == nil || !strings.Contains(err.Error(), "bring it up with kubeboot") {
			t.Errorf("a control-plane node without the file: err %v", err)
		}
	})
}
