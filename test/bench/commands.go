package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The cluster both tools render: kubeadm's defaults, spelled out in both
// configs. kubeadm refuses a loopback advertise address, hence a private
// one; the network namespace of each command keeps it unreachable.
const (
	nodeName      = "node1"
	renderAddress = "10.0.0.10"
	serviceSubnet = "10.96.0.0/12"
	dnsDomain     = "cluster.local"
)

// algorithm is a key algorithm in each tool's spelling.
type algorithm struct {
	label    string // as in the report: kubeboot's name
	kubeboot string // certificates.keyAlgorithm; empty: kubeboot's default
	kubeadm  string // encryptionAlgorithm
}

var (
	rsa2048 = algorithm{label: "rsa-2048", kubeboot: "rsa-2048", kubeadm: "RSA-2048"}
	// ecdsaP256 is kubeboot's default, so its config leaves the field out.
	ecdsaP256 = algorithm{label: "ecdsa-p256", kubeadm: "ECDSA-P256"}
)

func kubebootConfig(version string, alg algorithm) string {
	c := fmt.Sprintf(`apiVersion: kubeboot.io/v1alpha1
kind: ClusterConfiguration
clusterName: kubernetes
kubernetesVersion: %s
node:
  name: %s
  advertiseAddress: %s
networking:
  serviceSubnet: %s
  dnsDomain: %s
`, version, nodeName, renderAddress, serviceSubnet, dnsDomain)
	if alg.kubeboot != "" {
		c += "certificates:\n  keyAlgorithm: " + alg.kubeboot + "\n"
	}
	return c
}

// kubeadmConfig is the same cluster for kubeadm. kubeadm refuses --cert-dir
// next to --config, so the certificate dir is part of the file.
func kubeadmConfig(version string, alg algorithm, certDir string) string {
	return fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: %s
  bindPort: 6443
nodeRegistration:
  name: %s
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
clusterName: kubernetes
kubernetesVersion: %s
certificatesDir: %s
encryptionAlgorithm: %s
networking:
  serviceSubnet: %s
  dnsDomain: %s
`, renderAddress, nodeName, version, certDir, alg.kubeadm, serviceSubnet, dnsDomain)
}

// commandSet builds the jobs, each with its files under one work dir.
type commandSet struct {
	o       options
	work    string
	version string
	kubeadm string
	// rssFile receives GNU time's report of each command.
	rssFile string
}

func (c commandSet) path(name string) string { return filepath.Join(c.work, name) }

func (c commandSet) writeFile(name, content string) (string, error) {
	p := c.path(name)
	return p, os.WriteFile(p, []byte(content), 0o600)
}

// freshDir returns a prepare function that empties dir.
func freshDir(dir string) func() error {
	return func() error {
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		return os.MkdirAll(dir, 0o700)
	}
}

func (c commandSet) kubebootConfigFile(alg algorithm) (string, error) {
	return c.writeFile("kubeboot-"+alg.label+".yaml", kubebootConfig(c.version, alg))
}

// kubeadmDryRun is `kubeadm init --dry-run`. It writes what it renders into
// $KUBEADM_INIT_DRYRUN_DIR and reuses what it finds there, so that dir is
// emptied before every run.
func (c commandSet) kubeadmDryRun(alg algorithm) (*job, error) {
	cfg, err := c.writeFile("kubeadm-dry-run-"+alg.label+".yaml", kubeadmConfig(c.version, alg, "/etc/kubernetes/pki"))
	if err != nil {
		return nil, err
	}
	out := c.path("kubeadm-dry-run-" + alg.label)
	return &job{
		name:    "kubeadm init --dry-run (" + alg.label + ")",
		shown:   "KUBEADM_INIT_DRYRUN_DIR=<empty dir> kubeadm init --dry-run --skip-phases=preflight --config <kubeadm " + alg.label + ">",
		prepare: freshDir(out),
		steps: []step{{
			argv: []string{c.kubeadm, "init", "--dry-run", "--skip-phases=preflight", "--config", cfg},
			env:  []string{"KUBEADM_INIT_DRYRUN_DIR=" + out},
		}},
	}, nil
}

// kubebootDryRun is `kubeboot init --dry-run`. --root points it at an empty
// dir, so whatever this machine has under /etc/kubernetes is not reused.
func (c commandSet) kubebootDryRun(alg algorithm) (*job, error) {
	cfg, err := c.kubebootConfigFile(alg)
	if err != nil {
		return nil, err
	}
	empty := c.path("empty")
	if err := os.MkdirAll(empty, 0o700); err != nil {
		return nil, err
	}
	return &job{
		name:  "kubeboot init --dry-run (" + alg.label + defaultMark(alg) + ")",
		shown: "kubeboot init --dry-run --skip-phases preflight --root <empty dir> --config <kubeboot " + alg.label + ">",
		steps: []step{{argv: []string{c.o.kubeboot, "init", "--dry-run", "--skip-phases", "preflight", "--root", empty, "--config", cfg}}},
		check: func([]byte) error {
			entries, err := os.ReadDir(empty)
			if err != nil {
				return err
			}
			if len(entries) > 0 {
				return fmt.Errorf("a dry run wrote under its --root: %s", entries[0].Name())
			}
			return nil
		},
	}, nil
}

func defaultMark(alg algorithm) string {
	if alg.kubeboot == "" {
		return ", default"
	}
	return ""
}

// kubeadmPhases is `kubeadm init phase certs all` then `kubeconfig all`
// into an empty dir.
func (c commandSet) kubeadmPhases(alg algorithm) (*job, error) {
	out := c.path("kubeadm-phases-" + alg.label)
	cfg, err := c.writeFile("kubeadm-phases-"+alg.label+".yaml", kubeadmConfig(c.version, alg, filepath.Join(out, "pki")))
	if err != nil {
		return nil, err
	}
	return &job{
		name:    "kubeadm init phase certs all + kubeconfig all (" + alg.label + ")",
		shown:   "kubeadm init phase certs all --config <kubeadm " + alg.label + ">; kubeadm init phase kubeconfig all --config <same> --kubeconfig-dir <empty dir>",
		prepare: freshDir(out),
		steps: []step{
			{argv: []string{c.kubeadm, "init", "phase", "certs", "all", "--config", cfg}},
			{argv: []string{c.kubeadm, "init", "phase", "kubeconfig", "all", "--config", cfg, "--kubeconfig-dir", out}},
		},
	}, nil
}

// kubebootPhases is `kubeboot init phase certs` then `kubeconfig` under a
// fresh --root.
func (c commandSet) kubebootPhases(alg algorithm) (*job, error) {
	cfg, err := c.kubebootConfigFile(alg)
	if err != nil {
		return nil, err
	}
	root := c.path("kubeboot-phases-" + alg.label)
	return &job{
		name:    "kubeboot init phase certs + kubeconfig (" + alg.label + defaultMark(alg) + ")",
		shown:   "kubeboot init phase certs --root <empty dir> --config <kubeboot " + alg.label + ">; kubeboot init phase kubeconfig --root <same> --config <same>",
		prepare: freshDir(root),
		steps: []step{
			{argv: []string{c.o.kubeboot, "init", "phase", "certs", "--root", root, "--config", cfg}},
			{argv: []string{c.o.kubeboot, "init", "phase", "kubeconfig", "--root", root, "--config", cfg}},
		},
	}, nil
}

// initResult is the final line of `kubeboot init -o json`.
type initResult struct {
	Result *struct {
		OK        bool     `json:"ok"`
		Error     string   `json:"error"`
		Written   []string `json:"written"`
		Unchanged []string `json:"unchanged"`
	} `json:"result"`
}

// converged is a re-run of `kubeboot init` on a node where a first run
// wrote everything; each run must write nothing. unchanged receives the
// number of files the last run found in place.
func (c commandSet) converged(ctx context.Context, unchanged *int) (*job, error) {
	cfg, err := c.kubebootConfigFile(ecdsaP256)
	if err != nil {
		return nil, err
	}
	root := c.path("kubeboot-converged")
	argv := []string{c.o.kubeboot, "init", "--root", root, "--skip-phases", "wait,bootstrap-admin", "--config", cfg, "-o", "json"}
	if _, err := execTimed(ctx, step{argv: argv}, nil, c.rssFile); err != nil {
		return nil, fmt.Errorf("first run of the converged node: %w", err)
	}
	return &job{
		name:  "kubeboot init, converged re-run (ecdsa-p256, default)",
		shown: "kubeboot init --root <node written by a first run> --skip-phases wait,bootstrap-admin --config <kubeboot ecdsa-p256> -o json",
		steps: []step{{argv: argv}},
		check: func(stdout []byte) error {
			lines := strings.Split(strings.TrimSpace(string(stdout)), "\n")
			var res initResult
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
				return fmt.Errorf("decode the -o json result: %w", err)
			}
			if res.Result == nil {
				return errors.New("no result line in the -o json output")
			}
			if !res.Result.OK {
				return errors.New(res.Result.Error)
			}
			if len(res.Result.Written) > 0 {
				return fmt.Errorf("the re-run wrote %d files: %s", len(res.Result.Written), strings.Join(res.Result.Written, ", "))
			}
			*unchanged = len(res.Result.Unchanged)
			return nil
		},
	}, nil
}

// convergedDiff is `kubeboot diff` of the node converged wrote: its
// files compared with what init would write (offline, so no addon), each
// run finding nothing to change.
func (c commandSet) convergedDiff() (*job, error) {
	cfg, err := c.kubebootConfigFile(ecdsaP256)
	if err != nil {
		return nil, err
	}
	return &job{
		name:  "kubeboot diff, converged node (ecdsa-p256, default)",
		shown: "kubeboot diff --root <the converged re-run's node> --config <kubeboot ecdsa-p256> -o json",
		steps: []step{{argv: []string{c.o.kubeboot, "diff", "--root", c.path("kubeboot-converged"), "--config", cfg, "-o", "json"}}},
		check: func(stdout []byte) error {
			var res struct {
				Result *struct {
					Changed     bool `json:"changed"`
					Differences int  `json:"differences"`
				} `json:"result"`
			}
			lines := strings.Split(strings.TrimSpace(string(stdout)), "\n")
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
				return fmt.Errorf("decode diff's -o json result: %w", err)
			}
			if res.Result == nil {
				return fmt.Errorf("no result in diff's -o json output %q", lines[len(lines)-1])
			}
			if res.Result.Changed {
				return fmt.Errorf("diff of the converged node found %d differences", res.Result.Differences)
			}
			return nil
		},
	}, nil
}

// commandResults are the measured groups plus what the report needs to
// interpret them.
type commandResults struct {
	render, phases, converged *group
	// unchanged is how many files the converged re-run found in place.
	unchanged int
	// keysKubeboot and keysKubeadm are the distinct private keys of a
	// node's rsa-2048 PKI and kubeconfigs, as each tool's phases made it.
	keysKubeboot, keysKubeadm int
}

// measureCommands times every whole-command job.
func measureCommands(ctx context.Context, o options, work, version string) (commandResults, error) {
	var res commandResults
	dir := filepath.Join(work, "commands")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return res, err
	}
	if err := ensureGNUTime(ctx); err != nil {
		return res, err
	}
	c := commandSet{o: o, work: dir, version: version, kubeadm: filepath.Join(o.binDir, "kubeadm"), rssFile: filepath.Join(dir, "rss")}
	jobs := func(builders ...func() (*job, error)) ([]*job, error) {
		var js []*job
		for _, b := range builders {
			j, err := b()
			if err != nil {
				return nil, err
			}
			js = append(js, j)
		}
		return js, nil
	}
	bind := func(f func(algorithm) (*job, error), alg algorithm) func() (*job, error) {
		return func() (*job, error) { return f(alg) }
	}

	render, err := jobs(bind(c.kubeadmDryRun, rsa2048), bind(c.kubebootDryRun, rsa2048), bind(c.kubebootDryRun, ecdsaP256), bind(c.kubeadmDryRun, ecdsaP256))
	if err != nil {
		return res, err
	}
	res.render = &group{title: "full render", jobs: render, ref: render[0]}
	phases, err := jobs(bind(c.kubeadmPhases, rsa2048), bind(c.kubebootPhases, rsa2048), bind(c.kubebootPhases, ecdsaP256), bind(c.kubeadmPhases, ecdsaP256))
	if err != nil {
		return res, err
	}
	res.phases = &group{title: "phases alone", jobs: phases, ref: phases[0]}
	conv, err := c.converged(ctx, &res.unchanged)
	if err != nil {
		return res, err
	}
	diff, err := c.convergedDiff()
	if err != nil {
		return res, err
	}
	res.converged = &group{title: "converged re-run", jobs: []*job{conv, diff}}

	for _, g := range []*group{res.render, res.phases, res.converged} {
		if err := measure(ctx, g, o.warmup, o.runs, c.rssFile); err != nil {
			return res, err
		}
	}
	// The last phases runs are still on disk.
	if res.keysKubeboot, err = countKeys(c.path("kubeboot-phases-" + rsa2048.label)); err != nil {
		return res, err
	}
	res.keysKubeadm, err = countKeys(c.path("kubeadm-phases-" + rsa2048.label))
	return res, err
}
