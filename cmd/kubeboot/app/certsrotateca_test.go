package app

import (
	"strings"
	"testing"
)

// TestRotateCACommandRefusals: what the commands refuse before they
// reach a cluster or a node, exit 2, saying why.
func TestRotateCACommandRefusals(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"certs", "rotate-ca", "--config", "cluster.yaml"}, "certs rotate-ca takes --kubeconfig, not --config"},
		{[]string{"certs", "rotate-ca", "--node-timeout", "0s"}, "--node-timeout and --rollout-timeout: want positive durations"},
		{[]string{"certs", "rotate-ca", "--kubeconfig", dir + "/missing"}, "--kubeconfig: stat " + dir + "/missing"},
		{[]string{"certs", "rotate-ca", "step", "sign", "--files", dir}, `--step "sign": want one of [trust reissue kubelet drop]`},
		{[]string{"certs", "rotate-ca", "step", "trust", "--files", dir + "/missing"}, "--files: read the rotation's files"},
		{[]string{"certs", "rotate-ca", "on-node", "--step", "trust "}, `--step "trust ": want one of`},
	} {
		if code, _, stderr := runCLI(t, tc.args...); code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, %s; want exit 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}
