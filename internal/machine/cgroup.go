package machine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// cgroupParent is the cgroup, in every hierarchy, under which the machines
// of this host live.
const cgroupParent = "kubeboot-machines"

// cgroupName is the machine's cgroup under cgroupParent: its name and a
// hash of its dir, so that machines of two labs never share one.
func (m Machine) cgroupName() string {
	sum := sha256.Sum256([]byte(m.Dir))
	return m.Name + "-" + hex.EncodeToString(sum[:])[:8]
}

// cgroupRoot is where a host mounts its cgroup hierarchies.
const cgroupRoot = "/sys/fs/cgroup"

// hierarchies lists the mount points of the host's cgroup hierarchies: on
// cgroup v1 one per controller, systemd's named one, and the empty v2 one
// of a hybrid host. (A pure cgroup v2 host, with its one unified
// hierarchy, is untested: this project's hosts are v1.)
func hierarchies() ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("list cgroup hierarchies: %w", err)
	}
	return hierarchiesIn(string(data))
}

// hierarchiesIn lists the cgroup mount points of a mountinfo text that
// are under cgroupRoot. Mounts elsewhere are not the host's hierarchies:
// systemd-nspawn booting a machine on a hybrid host mounts the v2 one for
// a moment at /tmp/unifiedXXXXXX, and removes it, while the lab boots the
// other machines.
func hierarchiesIn(mountinfo string) ([]string, error) {
	var mounts []string
	for _, line := range strings.Split(mountinfo, "\n") {
		// The fields after " - " are the file system type, the source and
		// the super block's options.
		before, after, ok := strings.Cut(line, " - ")
		fields, fsFields := strings.Fields(before), strings.Fields(after)
		if !ok || len(fields) < 5 || len(fsFields) < 1 {
			continue
		}
		cgroup := fsFields[0] == "cgroup" || fsFields[0] == "cgroup2"
		if cgroup && (fields[4] == cgroupRoot || strings.HasPrefix(fields[4], cgroupRoot+"/")) {
			mounts = append(mounts, fields[4])
		}
	}
	slices.Sort(mounts)
	mounts = slices.Compact(mounts)
	if len(mounts) == 0 {
		return nil, fmt.Errorf("list cgroup hierarchies: no cgroup file system is mounted under %s", cgroupRoot)
	}
	return mounts, nil
}

// makeCgroups creates the machine's cgroup in every hierarchy and returns
// their cgroup.procs files. A v1 cpuset cgroup takes no process until it
// has CPUs and memory nodes, so each new one gets its parent's.
func (m Machine) makeCgroups() ([]string, error) {
	mounts, err := hierarchies()
	if err != nil {
		return nil, err
	}
	var procs []string
	for _, mount := range mounts {
		dir := mount
		for _, part := range []string{cgroupParent, m.cgroupName()} {
			parent := dir
			dir = filepath.Join(dir, part)
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return nil, fmt.Errorf("make the cgroup of machine %s: %w", m.Name, err)
			}
			for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
				if err := inherit(parent, dir, file); err != nil {
					return nil, fmt.Errorf("make the cgroup of machine %s: %w", m.Name, err)
				}
			}
		}
		procs = append(procs, filepath.Join(dir, "cgroup.procs"))
	}
	return procs, nil
}

// inherit copies a cgroup file from parent to dir when dir's is empty;
// files a hierarchy does not have are skipped.
func inherit(parent, dir, file string) error {
	own, err := os.ReadFile(filepath.Join(dir, file))
	if errors.Is(err, fs.ErrNotExist) || (err == nil && strings.TrimSpace(string(own)) != "") {
		return nil
	}
	if err != nil {
		return err
	}
	value, err := os.ReadFile(filepath.Join(parent, file))
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, file), value, 0o644)
}

// removeCgroups removes the machine's cgroups in every hierarchy, deepest
// first (the slices its systemd and kubelet made in the v1 controllers
// outlive it).
func (m Machine) removeCgroups() error {
	mounts, err := hierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, mount := range mounts {
		dir := filepath.Join(mount, cgroupParent, m.cgroupName())
		var dirs []string
		_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		slices.Reverse(dirs)
		for _, d := range dirs {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove cgroup %s of machine %s: %w", d, m.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// removeCgroupParent removes cgroupParent from every hierarchy where no
// machine is left in it.
func removeCgroupParent() {
	mounts, _ := hierarchies()
	for _, mount := range mounts {
		_ = syscall.Rmdir(filepath.Join(mount, cgroupParent))
	}
}

// clearCgroups removes the cgroups of a machine that has stopped. The
// processes of a killed machine may take a moment to exit, and a cgroup
// goes only once it holds none.
func (m Machine) clearCgroups() error {
	var last error
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		last = m.removeCgroups()
		return last == nil, nil
	}); err != nil {
		return last
	}
	return nil
}

// Cgroups lists the machine's cgroups that exist on the host, one per
// hierarchy: none once the machine is removed.
func (m Machine) Cgroups() ([]string, error) {
	mounts, err := hierarchies()
	if err != nil {
		return nil, err
	}
	var found []string
	for _, mount := range mounts {
		dir := filepath.Join(mount, cgroupParent, m.cgroupName())
		if _, err := os.Stat(dir); err == nil {
			found = append(found, dir)
		}
	}
	return found, nil
}
