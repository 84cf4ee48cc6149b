package machine

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// initScript is the machine's first process: it makes the machine's
// cgroup controllers writable, then becomes systemd. systemd-nspawn mounts
// a cgroup v1 host's controllers read-only in the machine; this machine's
// cgroups are its own (Boot placed it in a cgroup of its own in every
// hierarchy), and its systemd and kubelet create slices and QoS cgroups in
// them, as on a node. systemd decides at start which controllers it
// manages, so they must be writable before it starts; remount,bind changes
// this mount only, never the hierarchy. A kind node's entrypoint does the
// same before it starts systemd.
const initScript = `#!/bin/sh
set -e
for c in /sys/fs/cgroup/*/; do
	if mountpoint -q "$c"; then mount -o remount,bind,rw "$c"; fi
done
exec /usr/lib/systemd/systemd "$@"
`

// initPath is where the machine's first process is, inside it.
const initPath = "/machine-init"

// systemConf shortens the time systemd waits for a unit to stop, so that a
// machine powers off in seconds even when a container ignores SIGTERM.
const systemConf = `[Manager]
DefaultTimeoutStopSec=10s
`

// maskedUnits are the units of the shared /usr a machine does not start
// (each masked: linked to /dev/null in its /etc/systemd/system): nobody
// logs in on its console, answers a password prompt there or opens a
// session in it. Each of them holds an inotify instance, and all the
// machines' processes are root's in the host's user namespace, so they
// share root's fs.inotify.max_user_instances with the host (128 by
// default): without these, each machine holds four fewer.
var maskedUnits = []string{
	"console-getty.service",
	"systemd-ask-password-console.path",
	"systemd-ask-password-wall.path",
	"systemd-logind.service",
}

// Prepare creates the machine's root the first time: the usual top-level
// dirs (bin, lib, lib64 and sbin as links into the shared /usr, as on a
// merged-/usr Debian), and an /etc of its own: os-release, a machine-id
// drawn at random, the hostname, hosts, the host's system users and groups
// (those the shared /usr's packages made: messagebus for D-Bus, and the
// owners the package database's overrides name), Debian's alternatives
// (the links of the shared /usr's commands, such as awk, point into
// /etc/alternatives), the masks of maskedUnits, and its first process
// (initPath).
// A root that exists is kept as it is, first process included: its /etc
// and /var are the machine's disk, which survive a reboot.
func (m Machine) Prepare() error {
	root := m.Root()
	for _, d := range []string{m.usrChanges(), m.dpkgChanges()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("prepare machine %s: %w", m.Name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "etc", "machine-id")); err == nil {
		return nil
	}
	for _, d := range []string{"etc/systemd/system.conf.d", "etc/systemd/system", "var/lib/dpkg", "run", "tmp", "usr", "proc", "sys", "dev", "root", "opt"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return fmt.Errorf("prepare machine %s: %w", m.Name, err)
		}
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), 0o777|os.ModeSticky); err != nil {
		return fmt.Errorf("prepare machine %s: %w", m.Name, err)
	}
	for _, l := range []string{"bin", "lib", "lib64", "sbin"} {
		if err := os.Symlink("usr/"+l, filepath.Join(root, l)); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("prepare machine %s: %w", m.Name, err)
		}
	}
	osRelease, err := os.ReadFile("/usr/lib/os-release")
	if err != nil {
		return fmt.Errorf("prepare machine %s: read the host's os-release: %w", m.Name, err)
	}
	passwd, err := systemAccounts("/etc/passwd")
	if err != nil {
		return fmt.Errorf("prepare machine %s: %w", m.Name, err)
	}
	group, err := systemAccounts("/etc/group")
	if err != nil {
		return fmt.Errorf("prepare machine %s: %w", m.Name, err)
	}
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return fmt.Errorf("prepare machine %s: %w", m.Name, err)
	}
	etc := []struct{ name, content string }{
		{"etc/os-release", string(osRelease)},
		{"etc/hostname", m.Name + "\n"},
		{"etc/hosts", "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n127.0.1.1 " + m.Name + "\n"},
		{"etc/passwd", passwd},
		{"etc/group", group},
		{"etc/nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n"},
		{"etc/resolv.conf", ""},
		{"etc/systemd/system.conf.d/machine.conf", systemConf},
		// Written last: its presence marks a prepared root.
		{"etc/machine-id", hex.EncodeToString(id) + "\n"},
	}
	if err := copyAlternatives(filepath.Join(root, "etc", "alternatives")); err != nil {
		return fmt.Errorf("prepare machine %s: %w", m.Name, err)
	}
	for _, unit := range maskedUnits {
		if err := os.Symlink("/dev/null", filepath.Join(root, "etc/systemd/system", unit)); err != nil {
			return fmt.Errorf("prepare machine %s: mask %s: %w", m.Name, unit, err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, initPath), []byte(initScript), 0o755); err != nil {
		return fmt.Errorf("prepare machine %s: %w", m.Name, err)
	}
	for _, f := range etc {
		if err := os.WriteFile(filepath.Join(root, f.name), []byte(f.content), 0o644); err != nil {
			return fmt.Errorf("prepare machine %s: %w", m.Name, err)
		}
	}
	return nil
}

// systemAccounts is the host's account file at path (passwd or group)
// with only its system entries: root, the IDs below 1000 that packages
// take, and nobody's 65534. People's accounts stay on the host.
func systemAccounts(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read the host's system accounts: %w", err)
	}
	var b strings.Builder
	for line := range strings.Lines(string(data)) {
		fields := strings.Split(strings.TrimSuffix(line, "\n"), ":")
		if len(fields) < 3 {
			continue
		}
		if id, err := strconv.Atoi(fields[2]); err == nil && (id < 1000 || id == 65534) {
			b.WriteString(strings.Join(fields, ":") + "\n")
		}
	}
	if !strings.HasPrefix(b.String(), "root:") {
		return "", fmt.Errorf("the host's %s does not start with root's entry", path)
	}
	return b.String(), nil
}

// copyAlternatives copies the host's /etc/alternatives, a dir of links, to
// dst: the shared /usr's links (/usr/bin/awk, ...) lead through it.
func copyAlternatives(dst string) error {
	entries, err := os.ReadDir("/etc/alternatives")
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join("/etc/alternatives", e.Name()))
		if err != nil {
			continue // not a link: the README
		}
		if err := os.Symlink(target, filepath.Join(dst, e.Name())); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	return nil
}
