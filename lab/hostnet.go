package lab

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// namedNetnsDir is where `ip netns` keeps its named network namespaces,
// the lab's nodes' among them.
const namedNetnsDir = "/run/netns"

// InNamedNetworkNamespace says whether this process runs in one of the
// named network namespaces of `ip netns`, as a node of `lab up --cluster`
// does (kb-<name>-<node>), rather than in the host's own, as a single lab
// node does. PID 1's namespace is not always readable, so the test is
// whether this process's namespace is one of the named ones.
func InNamedNetworkNamespace() (bool, error) {
	self, err := nsID("/proc/self/ns/net")
	if err != nil {
		return false, fmt.Errorf("read this process's network namespace: %w", err)
	}
	named, err := filepath.Glob(filepath.Join(namedNetnsDir, "*"))
	if err != nil {
		return false, err
	}
	for _, path := range named {
		id, err := nsID(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("read network namespace %s: %w", path, err)
		}
		if id == self {
			return true, nil
		}
	}
	return false, nil
}

// nsID identifies a namespace file by its device and inode.
func nsID(path string) ([2]uint64, error) {
	info, err := os.Stat(path)
	if err != nil {
		return [2]uint64{}, err
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return [2]uint64{}, fmt.Errorf("stat %s: no device and inode", path)
	}
	return [2]uint64{st.Dev, st.Ino}, nil
}
