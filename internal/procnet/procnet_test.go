package procnet

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// listenEnv makes the test binary a helper process that listens on the
// address in it and prints the port.
const listenEnv = "PROCNET_TEST_LISTEN"

func TestMain(m *testing.M) {
	if addr := os.Getenv(listenEnv); addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println(ln.Addr().(*net.TCPAddr).Port)
		select {} // until killed
	}
	os.Exit(m.Run())
}

// listenInChild starts a helper process listening on addr and returns it
// with its port, once it listens.
func listenInChild(t *testing.T, addr string) (*exec.Cmd, int) {
	t.Helper()
	return listenIn(t, os.Args[0], addr)
}

// listenIn is listenInChild with the test binary at binary, a copy.
func listenIn(t *testing.T, binary, addr string) (*exec.Cmd, int) {
	t.Helper()
	cmd := exec.Command(binary, "-test.run=^$")
	cmd.Env = append(os.Environ(), listenEnv+"="+addr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("helper on %s: %v", addr, err)
	}
	port, err := strconv.Atoi(line[:len(line)-1])
	if err != nil {
		t.Fatalf("helper on %s said %q", addr, line)
	}
	return cmd, port
}

func TestListenerFindsTheChildAndItsStartTime(t *testing.T) {
	before := now(t)
	cmd, port := listenInChild(t, "127.0.0.1:0")
	after := now(t)

	p, err := Listener("127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	if p.PID != cmd.Process.Pid {
		t.Errorf("pid %d, want the helper's %d", p.PID, cmd.Process.Pid)
	}
	if !p.StartedAfter(before) || p.Start.SinceBoot > after.SinceBoot || p.Start.BootID != before.BootID {
		t.Errorf("started %+v, want between %+v and %+v", p.Start, before, after)
	}
	if again, _ := Listener("localhost", port); again != p {
		t.Errorf("by name: %v, want %v", again, p)
	}
}

func TestListenerTellsInstancesApart(t *testing.T) {
	first, port := listenInChild(t, "127.0.0.1:0")
	old, err := Listener("127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	if !old.Running() {
		t.Fatalf("%s is not running", old)
	}
	// Killed but not waited for, it stays a zombie: not running.
	_ = first.Process.Kill()
	for deadline := time.Now().Add(5 * time.Second); old.Running(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the killed %s is still running", old)
		}
	}
	if state, _, err := readStat(old.PID); err != nil || state != 'Z' {
		t.Errorf("the killed helper: state %q, %v; want a zombie", state, err)
	}
	_ = first.Wait()
	if old.Running() {
		t.Errorf("the exited %s is still running", old)
	}
	// Start times are truncated to a Tick, so an instant within a Tick of
	// the old start cannot tell the two apart: wait past it.
	since := now(t)
	for ; since.SinceBoot <= old.Start.SinceBoot+Tick; since = now(t) {
		time.Sleep(Tick)
	}
	listenInChild(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	next, err := Listener("127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	if next == old || !next.StartedAfter(since) || old.StartedAfter(since) || !next.Running() {
		t.Errorf("the new instance (%s) is not told apart from the old one (%s), replaced at %s", next, old, since.SinceBoot)
	}
}

// now is Now, failing the test on an error.
func now(t *testing.T) Instant {
	t.Helper()
	i, err := Now()
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// A process of another boot started after any instant of this one.
func TestStartedAfterAcrossBoots(t *testing.T) {
	i := now(t)
	earlier := Process{PID: 1, Start: Instant{BootID: i.BootID, SinceBoot: i.SinceBoot - time.Second}}
	if earlier.StartedAfter(i) {
		t.Error("a process of this boot that started a second before counts as after")
	}
	if other := (Process{PID: 1, Start: Instant{BootID: "another boot", SinceBoot: time.Second}}); !other.StartedAfter(i) {
		t.Error("a process of another boot does not count as after")
	}
}

func TestListenerMatchesTheBoundAddress(t *testing.T) {
	cmd, port := listenInChild(t, "0.0.0.0:0")
	for _, host := range []string{"127.0.0.1", "127.0.0.2"} {
		if p, err := Listener(host, port); err != nil || p.PID != cmd.Process.Pid {
			t.Errorf("wildcard socket seen from %s: %v, %v", host, p, err)
		}
	}

	_, port = listenInChild(t, "127.0.0.1:0")
	if _, err := Listener("127.0.0.2", port); !errors.Is(err, ErrNotListening) {
		t.Errorf("a socket bound to 127.0.0.1 seen from 127.0.0.2: %v, want ErrNotListening", err)
	}
}

func TestServesEvery(t *testing.T) {
	v4, v6 := []net.IP{net.ParseIP("127.0.0.1")}, []net.IP{net.ParseIP("::1")}
	for _, tt := range []struct {
		bound string
		hosts []net.IP
		want  bool
	}{
		{"0.0.0.0", v4, true},
		{"0.0.0.0", v6, false},
		{"::", v4, true},
		{"::", v6, true},
		{"127.0.0.1", v4, false},
	} {
		if got := servesEvery(net.ParseIP(tt.bound), tt.hosts); got != tt.want {
			t.Errorf("socket on %s, host %v: %v, want %v", tt.bound, tt.hosts, got, tt.want)
		}
	}
}

func TestListenerIPv6(t *testing.T) {
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Fatalf("this test needs IPv6 loopback: %v", err)
	}
	_ = ln.Close()
	cmd, port := listenInChild(t, "[::1]:0")
	if p, err := Listener("::1", port); err != nil || p.PID != cmd.Process.Pid {
		t.Errorf("::1: %v, %v", p, err)
	}
}

func TestListenerNothingListens(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	if _, err := Listener("127.0.0.1", port); !errors.Is(err, ErrNotListening) {
		t.Errorf("got %v, want ErrNotListening", err)
	}
}

// kernelHex prints an address as /proc/net/tcp does: 32-bit words in hex,
// each in the host's byte order.
func kernelHex(ip net.IP) string {
	if v4 := ip.To4(); v4 != nil {
		ip = v4
	}
	var b strings.Builder
	for i := 0; i < len(ip); i += 4 {
		fmt.Fprintf(&b, "%08X", binary.NativeEndian.Uint32(ip[i:]))
	}
	return b.String()
}

func TestParseAddress(t *testing.T) {
	for _, tt := range []struct {
		ip   string
		port int
	}{
		{"127.0.0.1", 8080},
		{"0.0.0.0", 80},
		{"::1", 80},
		{"::ffff:127.0.0.70", 2195},
		{"fd00::10:2", 6443},
	} {
		want := net.ParseIP(tt.ip)
		raw := want
		if strings.Contains(tt.ip, ":") {
			raw = want.To16() // an IPv4-mapped address stays 16 bytes in tcp6
			var b strings.Builder
			for i := 0; i < 16; i += 4 {
				fmt.Fprintf(&b, "%08X", binary.NativeEndian.Uint32(raw[i:]))
			}
			in := fmt.Sprintf("%s:%04X", b.String(), tt.port)
			ip, port, err := parseAddress(in)
			if err != nil || !ip.Equal(want) || port != tt.port {
				t.Errorf("%s: %v:%d (%v), want %s:%d", in, ip, port, err, tt.ip, tt.port)
			}
			continue
		}
		in := fmt.Sprintf("%s:%04X", kernelHex(raw), tt.port)
		ip, port, err := parseAddress(in)
		if err != nil || !ip.Equal(want) || port != tt.port {
			t.Errorf("%s: %v:%d (%v), want %s:%d", in, ip, port, err, tt.ip, tt.port)
		}
	}
	// The kernel's own rendering of 127.0.0.1:8080 on a little-endian host.
	if binary.NativeEndian.Uint16([]byte{1, 0}) == 1 {
		if ip, port, err := parseAddress("0100007F:1F90"); err != nil || !ip.Equal(net.IPv4(127, 0, 0, 1)) || port != 8080 {
			t.Errorf("0100007F:1F90: %v:%d (%v)", ip, port, err)
		}
	}
	for _, bad := range []string{"", "0100007F", "zz00007F:0050", "0100007F:XYZ", "01007F:0050", "0100007F0100007F:0050"} {
		if _, _, err := parseAddress(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestExecuting: a process running a copy of this test binary is found by
// the copy's path, with its start on the wall clock; once another file is
// installed at the path, as a package's upgrade does, no process runs the
// file there.
func TestExecuting(t *testing.T) {
	dir := t.TempDir()
	binary := filepath.Join(dir, "helper")
	install := func() {
		t.Helper()
		data, err := os.ReadFile(os.Args[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(binary+".new", data, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(binary+".new", binary); err != nil {
			t.Fatal(err)
		}
	}
	install()
	if _, ok := Executing(binary); ok {
		t.Fatal("a process runs the helper before it started")
	}
	before := time.Now().Add(-Tick)
	cmd, _ := listenIn(t, binary, "127.0.0.1:0")
	after := time.Now()
	p, ok := Executing(binary)
	if !ok || p.PID != cmd.Process.Pid {
		t.Fatalf("Executing = %v, %v; want the helper's pid %d", p, ok, cmd.Process.Pid)
	}
	started, err := p.Start.WallTime()
	if err != nil || started.Before(before) || started.After(after) {
		t.Errorf("started at %v (%v), want between %v and %v", started, err, before, after)
	}
	install()
	if p, ok := Executing(binary); ok {
		t.Errorf("Executing after a new file was installed = %v; the running process runs the old one", p)
	}
}
