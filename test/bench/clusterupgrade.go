package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The whole-cluster upgrade section: `-only cluster-upgrade` runs it
// alone, and its heading is where that run puts it in the report.
const (
	clusterUpgradeOnly    = "cluster-upgrade"
	clusterUpgradeHeading = "## Whole-cluster upgrade: upgrade cluster beside kubeadm's procedure"
	// clusterUpgradeBefore is the heading the section goes before when a
	// report without it gets it.
	clusterUpgradeBefore = etcdSnapshotHeading
)

// clusterUpgradeResults are the upgrade times and the Service's longest
// gaps, in seconds, per tool in round order, and what was measured when.
type clusterUpgradeResults struct {
	rounds    int
	took, gap map[string][]float64
	// rotateTook and rotateGap are certs rotate-ca's, on kubeboot's fleet.
	rotateTook, rotateGap []float64
	commit                string
	measured              time.Time
}

// measureClusterUpgrade runs test/e2e's TestUpgradeBench (build tag
// bench), which brings up a fleet of machines with each tool and upgrades
// it, -upgrade-rounds times in alternating order, and reads its "BENCH
// cluster-upgrade TOOL SECONDS GAP" lines.
func measureClusterUpgrade(ctx context.Context, o options) (*clusterUpgradeResults, error) {
	logf("whole-cluster upgrade: go test -tags 'e2e bench' -run TestUpgradeBench ./test/e2e (%d rounds of a fleet per tool: about 16 min for kubeboot's, with certs rotate-ca, 9 for kubeadm's)", o.upgradeRounds)
	cmd := exec.CommandContext(ctx, o.goBin, "test", "-count=1", "-tags", "e2e bench", "-run", "^TestUpgradeBench$", "-v", "-timeout", "4h", "./test/e2e/")
	cmd.Env = append(os.Environ(), "KUBEBOOT_BIN_DIR="+o.binDir, "KUBEBOOT_BENCH_ROUNDS="+strconv.Itoa(o.upgradeRounds))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if werr := os.WriteFile(filepath.Join(o.rawDir, "cluster-upgrade.txt"), out, 0o644); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		return nil, fmt.Errorf("TestUpgradeBench: %w (its output is in %s)", err, filepath.Join(o.rawDir, "cluster-upgrade.txt"))
	}
	res := &clusterUpgradeResults{rounds: o.upgradeRounds, took: map[string][]float64{}, gap: map[string][]float64{}, measured: time.Now().UTC()}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) != 5 || f[0] != "BENCH" || (f[1] != "cluster-upgrade" && f[1] != "rotate-ca") {
			continue
		}
		took, err1 := strconv.ParseFloat(f[3], 64)
		gap, err2 := strconv.ParseFloat(f[4], 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("TestUpgradeBench printed %q", strings.TrimSpace(line))
		}
		if f[1] == "rotate-ca" {
			res.rotateTook, res.rotateGap = append(res.rotateTook, took), append(res.rotateGap, gap)
			continue
		}
		res.took[f[2]] = append(res.took[f[2]], took)
		res.gap[f[2]] = append(res.gap[f[2]], gap)
	}
	if len(res.rotateTook) != o.upgradeRounds {
		return nil, fmt.Errorf("TestUpgradeBench measured certs rotate-ca %d times, want %d", len(res.rotateTook), o.upgradeRounds)
	}
	for _, tool := range []string{"kubeboot", "kubeadm"} {
		if len(res.took[tool]) != o.upgradeRounds {
			return nil, fmt.Errorf("TestUpgradeBench measured %s %d times, want %d", tool, len(res.took[tool]), o.upgradeRounds)
		}
	}
	res.commit, err = output(ctx, "git", "describe", "--tags", "--always", "--dirty")
	return res, err
}

// writeClusterUpgradeOnly is `-only cluster-upgrade`: it measures the
// section and puts it in the report at -out in place of the section
// there, the rest of the report left as it is.
func writeClusterUpgradeOnly(ctx context.Context, o options) error {
	res, err := measureClusterUpgrade(ctx, o)
	if err != nil {
		return err
	}
	var b strings.Builder
	res.markdown(&b)
	return replaceSection(o.out, clusterUpgradeHeading, clusterUpgradeBefore, b.String())
}

// markdown writes the section.
func (r *clusterUpgradeResults) markdown(b *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("%s\n\n", clusterUpgradeHeading)
	w("Measured at kubeboot %s on %s (`go run ./test/bench -only %s` measures this section alone and replaces it here). ", r.commit, r.measured.Format("2006-01-02 15:04 MST"), clusterUpgradeOnly)
	w("test/e2e's `TestUpgradeBench` (build tag `bench`) brings up the fleet of `TestClusterLife` with each tool: four lab machines (systemd, containerd and the kubelet as services), ")
	w("two control-plane nodes behind the lab's load balancer and two workers, at v1.35.4: kubeboot's from their files at boot, kubeadm's with `kubeadm init --upload-certs` and `kubeadm join` (`--control-plane --certificate-key` on cp2). ")
	w("Then it times the upgrade of the whole cluster to v1.36.3, each node drained (`--ignore-daemonsets --delete-emptydir-data`) and uncordoned, cp1 first, as each tool's documentation says: ")
	w("kubeboot's one command from the host, `kubeboot upgrade cluster v1.36.3 --kubeconfig <the lab's>`, whose pod on each node installs the kubelet of v1.36.3 (the lab's `kubelet.installCommand`, a staged binary written over `/usr/bin/kubelet`) and runs `upgrade apply` on cp1 and `upgrade node` on the others; ")
	w("kubeadm's by script: on each node `kubectl drain`, the same kubelet written over `/usr/bin/kubelet`, `kubeadm upgrade apply v1.36.3 --yes` on cp1 and `upgrade node` on the others, `systemctl daemon-reload && systemctl restart kubelet`, a wait until the Node reports v1.36.3 and is Ready and, after a control-plane node, until every API server answers `/readyz` when asked directly, and `kubectl uncordon`; a drain cut off by an API server's restart (its connection closed mid-request) is run again, as its user would. ")
	w("kubeadm also renews the control plane's certificates (its default), kubeboot saves an etcd snapshot on each control-plane node. ")
	w("%d round(s), each a fresh fleet per tool, the tools' order alternating; a Service with two pods spread over the workers, behind a PodDisruptionBudget of `minAvailable: 1`, is probed from w1 through its ClusterIP every 100 ms throughout.\n\n", r.rounds)
	w("| sequence | wall min / median / max | ratio to kubeadm | the Service's longest gap (max) |\n|---|---|---|---|\n")
	ref := summarize(r.took["kubeadm"]).median
	for _, tool := range []string{"kubeboot", "kubeadm"} {
		took := summarize(r.took[tool])
		w("| %s | %s / %s / %s | %s | %s |\n", tool, fmtSeconds(took.min), fmtSeconds(took.median), fmtSeconds(took.max),
			fmtRatio(took.median/ref), fmtSeconds(summarize(r.gap[tool]).max))
	}
	w("\n")
	rotate := summarize(r.rotateTook)
	w("On kubeboot's fleet, once upgraded, `kubeboot certs rotate-ca --kubeconfig <the lab's>` replaces the cluster CA, the etcd CA, the front-proxy CA and the service-account key on its four nodes, step by step ")
	w("(trust on every node, the workloads restarted, reissue on each control-plane node, the kubeconfig's certificate, the kubelets' certificates, the workloads restarted again, drop on every node), with the same probe: ")
	w("wall %s / %s / %s (min / median / max), the Service's longest gap %s. kubeadm has no CA rotation to set beside it (kubernetes/kubeadm#2027); its documented manual procedure is a page of steps per node.\n\n",
		fmtSeconds(rotate.min), fmtSeconds(rotate.median), fmtSeconds(rotate.max), fmtSeconds(summarize(r.rotateGap).max))
}
