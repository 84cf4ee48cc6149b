// Package procnet tells which process listens on a TCP address of this
// host, from Linux's /proc: the socket tables of the caller's network
// namespace and the open files of every process the caller can see; and
// which process runs a given executable file (Executing).
//
// kubeboot uses it to tell a component's new instance from the old one: a
// pid may be reused, but a pid with its start time names one process.
// Start times are Instants: time since boot, which no clock step moves,
// with the boot they belong to.
package procnet

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Tick is the resolution of a process's start time: the kernel counts it
// in clock ticks of USER_HZ (100 per second on every Linux architecture Go
// supports), so a start time may be up to one Tick before the real start.
const Tick = 10 * time.Millisecond

// listenState is the state column of a listening socket in /proc/net/tcp.
const listenState = "0A"

// The errors Listener wraps.
var (
	// ErrNotListening means no socket listens on the address.
	ErrNotListening = errors.New("nothing listens")
	// ErrNotVisible means a socket listens, but no process this one can
	// see holds it: this process runs in another PID namespace, or
	// without the right to read other processes' file descriptors.
	ErrNotVisible = errors.New("no visible process holds the socket: run kubeboot as root in the host's PID namespace")
)

// Instant is a moment on the clock process start times are counted on.
type Instant struct {
	// BootID names the boot (/proc/sys/kernel/random/boot_id).
	BootID string `json:"bootID"`
	// SinceBoot is the time since that boot, suspend included.
	SinceBoot time.Duration `json:"sinceBoot"`
}

// Now is the current Instant.
func Now() (Instant, error) {
	id, err := bootID()
	if err != nil {
		return Instant{}, err
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return Instant{}, fmt.Errorf("read the time since boot: %w", err)
	}
	return Instant{BootID: id, SinceBoot: time.Duration(ts.Nano())}, nil
}

// bootID reads the current boot's ID once: it does not change while this
// process runs.
var bootID = sync.OnceValues(func() (string, error) {
	data, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("read the boot ID: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
})

// Process is one process instance.
type Process struct {
	// PID is the process ID in the caller's PID namespace.
	PID int
	// Start is when the process started, truncated to a Tick.
	Start Instant
}

// String is "pid 1234, started 12m3.45s after boot".
func (p Process) String() string {
	return fmt.Sprintf("pid %d, started %s after boot", p.PID, p.Start.SinceBoot)
}

// StartedAfter says whether the process started after i: in a later boot,
// or later in the same one. A start within a Tick before i counts, since
// start times are truncated to a Tick.
func (p Process) StartedAfter(i Instant) bool {
	return p.Start.BootID != i.BootID || p.Start.SinceBoot >= i.SinceBoot-Tick
}

// ownerAttempts is how often Listener looks for the owner of a listening
// socket before it says that no visible process holds it.
const ownerAttempts = 5

// Listener returns the process that listens on host:port over TCP. host
// is an IP address or a name to resolve; a socket bound to the unspecified
// address listens on every host of its family: 0.0.0.0 on IPv4 hosts, and
// :: on every host (taken to be dual-stack, as Linux makes it by default).
// When several processes share the socket, one of them is returned. The
// error wraps ErrNotListening or ErrNotVisible.
func Listener(host string, port int) (Process, error) {
	ips, err := addresses(host)
	if err != nil {
		return Process{}, err
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	var pid int
	// A process that is exiting closes its files before its socket leaves
	// the table, so a socket without a visible owner is looked up again:
	// by then it is gone, or another process holds the port.
	for attempt := 0; ; attempt++ {
		var inodes []string
		for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
			found, err := listeningInodes(table, ips, port)
			if err != nil {
				return Process{}, err
			}
			inodes = append(inodes, found...)
		}
		if len(inodes) == 0 {
			return Process{}, fmt.Errorf("%s: %w", addr, ErrNotListening)
		}
		pid, err = socketOwner(inodes)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNotVisible) || attempt == ownerAttempts-1 {
			return Process{}, fmt.Errorf("find the process listening on %s: %w", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, start, err := readStat(pid)
	if err != nil {
		return Process{}, fmt.Errorf("find the process listening on %s: %w", addr, err)
	}
	return Process{PID: pid, Start: start}, nil
}

// addresses resolves host to the IP addresses a socket may be bound to.
func addresses(host string) ([]net.IP, error) {
	if ip := net.ParseIP(host); ip != nil {
		return []net.IP{ip}, nil
	}
	ips, err := net.LookupIP(host)
	if err != nil {
		return nil, fmt.Errorf("resolve %q: %w", host, err)
	}
	return ips, nil
}

// listeningInodes reads one socket table and returns the inodes of the
// listening sockets bound to port on one of ips or the unspecified address.
func listeningInodes(table string, ips []net.IP, port int) ([]string, error) {
	f, err := os.Open(table)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // no IPv6 in this kernel
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var inodes []string
	lines := bufio.NewScanner(f)
	lines.Scan() // the header
	for lines.Scan() {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		fields := strings.Fields(lines.Text())
		if len(fields) < 10 || fields[3] != listenState {
			continue
		}
		ip, p, err := parseAddress(fields[1])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", table, err)
		}
		if p == port && (containsIP(ips, ip) || servesEvery(ip, ips)) {
			inodes = append(inodes, fields[9])
		}
	}
	return inodes, lines.Err()
}

// parseAddress decodes "0100007F:1F90": the address is printed as 32-bit
// words in hex, each in the host's byte order; the port in hex.
func parseAddress(s string) (net.IP, int, error) {
	hexIP, hexPort, ok := strings.Cut(s, ":")
	raw, err := hex.DecodeString(hexIP)
	if !ok || err != nil || len(raw) != net.IPv4len && len(raw) != net.IPv6len {
		return nil, 0, fmt.Errorf("malformed socket address %q", s)
	}
	ip := make(net.IP, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(ip[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if err != nil {
		return nil, 0, fmt.Errorf("malformed socket address %q", s)
	}
	return ip, int(port), nil
}

// servesEvery says whether a socket bound to ip accepts connections to
// one of ips: 0.0.0.0 takes every IPv4 address, :: every address.
func servesEvery(ip net.IP, ips []net.IP) bool {
	switch {
	case ip.Equal(net.IPv6unspecified):
		return true
	case ip.Equal(net.IPv4zero):
		return slices.ContainsFunc(ips, func(candidate net.IP) bool { return candidate.To4() != nil })
	}
	return false
}

func containsIP(ips []net.IP, ip net.IP) bool {
	for _, candidate := range ips {
		if candidate.Equal(ip) {
			return true
		}
	}
	return false
}

// socketOwner returns a process that holds one of the socket inodes open.
func socketOwner(inodes []string) (int, error) {
	wanted := map[string]bool{}
	for _, inode := range inodes {
		wanted["socket:["+inode+"]"] = true
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		fdDir := filepath.Join("/proc", p.Name(), "fd")
		// A process may exit, or belong to another user, while we look.
		fds, _ := os.ReadDir(fdDir)
		for _, fd := range fds {
			if link, err := os.Readlink(filepath.Join(fdDir, fd.Name())); err == nil && wanted[link] {
				return pid, nil
			}
		}
	}
	return 0, ErrNotVisible
}

// Running says whether the process still runs: a process with its pid and
// start time exists and is not a zombie waiting to be reaped.
func (p Process) Running() bool {
	state, start, err := readStat(p.PID)
	return err == nil && state != 'Z' && start == p.Start
}

// readStat reads a process's state (field 3 of /proc/<pid>/stat) and when
// it started (field 22, in ticks since boot).
func readStat(pid int) (byte, Instant, error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, Instant{}, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	end := strings.LastIndexByte(string(data), ')')
	if end < 0 {
		return 0, Instant{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(data[end+1:]))
	const startTimeField = 22 - 3 // fields counted from the state, field 3
	if len(fields) <= startTimeField {
		return 0, Instant{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	ticks, err := strconv.ParseInt(fields[startTimeField], 10, 64)
	if err != nil {
		return 0, Instant{}, fmt.Errorf("malformed /proc/%d/stat: %w", pid, err)
	}
	id, err := bootID()
	if err != nil {
		return 0, Instant{}, err
	}
	return fields[0][0], Instant{BootID: id, SinceBoot: time.Duration(ticks) * Tick}, nil
}

// Executing returns a process that runs the executable file at path, if
// one does: the same file, not whatever is at the path now (a package's
// upgrade puts a new file there while the old one still runs).
func Executing(path string) (Process, bool) {
	want, err := os.Stat(path)
	if err != nil {
		return Process{}, false
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return Process{}, false
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		// A process may exit, or hide its executable, while we look.
		exe, err := os.Stat(filepath.Join("/proc", p.Name(), "exe"))
		if err != nil || !os.SameFile(exe, want) {
			continue
		}
		if state, start, err := readStat(pid); err == nil && state != 'Z' {
			return Process{PID: pid, Start: start}, true
		}
	}
	return Process{}, false
}

// WallTime is when i was on the wall clock: now, less the time since i.
// An Instant of another boot has none.
func (i Instant) WallTime() (time.Time, error) {
	wall := time.Now()
	now, err := Now()
	if err != nil {
		return time.Time{}, err
	}
	if now.BootID != i.BootID {
		return time.Time{}, errors.New("the instant belongs to another boot")
	}
	return wall.Add(i.SinceBoot - now.SinceBoot), nil
}
