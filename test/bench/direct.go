package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/kubeboot/kubeboot/config"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// defaultPath follows the bin dir in a component's PATH, as in the lab's
// CRI runtime.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// copyNode copies a lab node's manifests, and every host path under src
// that they mount, to dst, and points every copied file at dst instead of
// src. What the components read (PKI, kubeconfigs, the API server's config
// files) thus comes along whatever the layout. etcd's data dir is left
// out: etcd starts empty, as it did in the lab.
func copyNode(src, dst string) error {
	manifestDir := filepath.Join(src, "manifests")
	manifests, err := filepath.Glob(filepath.Join(manifestDir, "*.yaml"))
	if err != nil {
		return err
	}
	paths := []string{manifestDir}
	var etcdData string
	for _, m := range manifests {
		pod, err := readPod(m)
		if err != nil {
			return err
		}
		for _, v := range pod.Spec.Volumes {
			if v.HostPath != nil && strings.HasPrefix(v.HostPath.Path, src+"/") && !slices.Contains(paths, v.HostPath.Path) {
				paths = append(paths, v.HostPath.Path)
			}
		}
		c := pod.Spec.Containers[0]
		for _, arg := range append(c.Command, c.Args...) {
			if dir, ok := strings.CutPrefix(arg, "--data-dir="); ok && c.Command[0] == "etcd" {
				etcdData = dir
			}
		}
	}
	if etcdData == "" {
		return errors.New("no --data-dir in the etcd manifest")
	}
	for _, p := range paths {
		if p == etcdData {
			continue
		}
		if err := copyTree(p, filepath.Join(dst, strings.TrimPrefix(p, src)), src, dst); err != nil {
			return fmt.Errorf("copy %s: %w", p, err)
		}
	}
	return nil
}

// copyTree copies a file or directory tree with its modes, replacing every
// occurrence of the path prefix from with to in the files' content.
func copyTree(srcPath, dstPath, from, to string) error {
	return filepath.WalkDir(srcPath, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		target := filepath.Join(dstPath, strings.TrimPrefix(path, srcPath))
		if d.IsDir() {
			return os.MkdirAll(target, info.Mode().Perm())
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		data = bytes.ReplaceAll(data, []byte(from+"/"), []byte(to+"/"))
		return os.WriteFile(target, data, info.Mode().Perm())
	})
}

func readPod(manifest string) (*corev1.Pod, error) {
	data, err := os.ReadFile(manifest)
	if err != nil {
		return nil, err
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(data, &pod); err != nil {
		return nil, fmt.Errorf("decode %s: %w", manifest, err)
	}
	if len(pod.Spec.Containers) != 1 || len(pod.Spec.Containers[0].Command) == 0 {
		return nil, fmt.Errorf("%s: want one container with a command", manifest)
	}
	return &pod, nil
}

// directStart starts the node's four components as plain processes, from
// their manifests, then times `kubeboot init phase wait` until every one is
// healthy. It returns the time from the first start to the event that saw
// the last component healthy, and stops every process it started.
func directStart(ctx context.Context, o options, configPath, dir string) (time.Duration, error) {
	var cmds []*exec.Cmd
	// The four components only: the CSR approver's manifest runs kubeboot
	// itself, and the wait does not look at it.
	for _, name := range config.ComponentNames {
		m := filepath.Join(dir, "manifests", name+".yaml")
		logFile, err := os.Create(filepath.Join(dir, strings.TrimSuffix(filepath.Base(m), ".yaml")+".log"))
		if err != nil {
			return 0, err
		}
		// Each child gets its own copy of the descriptor at Start.
		defer func() { _ = logFile.Close() }()
		cmd, err := podCommand(o, m, logFile)
		if err != nil {
			return 0, err
		}
		cmds = append(cmds, cmd)
	}
	var started []*exec.Cmd
	defer func() { stopProcesses(started) }()
	start := time.Now()
	for _, cmd := range cmds {
		if err := cmd.Start(); err != nil {
			return 0, fmt.Errorf("start %s: %w", cmd.Path, err)
		}
		started = append(started, cmd)
	}
	out, err := kubebootJSON(ctx, o, 5*time.Minute, "init", "phase", "wait", "--config", configPath, "-o", "json")
	if err != nil {
		return 0, fmt.Errorf("%w\n(component logs in %s)", err, dir)
	}
	events, err := readEvents(out)
	if err != nil {
		return 0, err
	}
	healthy, err := allHealthy(events)
	if err != nil {
		return 0, err
	}
	return healthy.Sub(start), nil
}

// podCommand is the process the lab's CRI runtime would start for the
// manifest's container: its command and args, the binary from the bin
// dir, its literal environment, its working dir. Like the kubelet, it
// first creates the DirectoryOrCreate host paths. Its output goes to log.
func podCommand(o options, manifest string, log *os.File) (*exec.Cmd, error) {
	pod, err := readPod(manifest)
	if err != nil {
		return nil, err
	}
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil && v.HostPath.Type != nil && *v.HostPath.Type == corev1.HostPathDirectoryOrCreate {
			if err := os.MkdirAll(v.HostPath.Path, 0o755); err != nil {
				return nil, err
			}
		}
	}
	c := pod.Spec.Containers[0]
	argv := append(append([]string{}, c.Command...), c.Args...)
	path := filepath.Join(o.binDir, argv[0])
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("%s: binary %s: %w", manifest, argv[0], err)
	}
	cmd := exec.Command(path, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Env = []string{"PATH=" + o.binDir + ":" + defaultPath}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
		}
	}
	cmd.Dir = c.WorkingDir
	if cmd.Dir == "" {
		cmd.Dir = "/"
	}
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group, so stopping it stops anything it spawned.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, nil
}

// stopProcesses stops the processes in reverse start order (etcd last, so
// the API server can shut down cleanly): SIGTERM to each one's process
// group, then SIGKILL if it has not exited within 20s.
func stopProcesses(cmds []*exec.Cmd) {
	for _, cmd := range slices.Backward(cmds) {
		done := make(chan error, 1)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		go func() { done <- cmd.Wait() }()
		var err error
		select {
		case err = <-done:
		case <-time.After(20 * time.Second):
			logf("%s did not stop within 20s of SIGTERM: killing it", cmd.Args[0])
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			err = <-done
		}
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			logf("wait for %s: %v", cmd.Args[0], err)
		}
	}
}
