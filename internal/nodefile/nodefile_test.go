package nodefile_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/fleet"
	"github.com/kubeboot/kubeboot/internal/nodefile"
	"github.com/kubeboot/kubeboot/internal/testsupport"
)

// fleetText is a fleet of a control-plane node and two workers, one known
// by its MAC address.
const fleetText = `apiVersion: kubeboot.io/v1alpha1
kind: Fleet
nodes:
- {name: cp1, role: control-plane, address: 10.0.0.11}
- {name: w1, role: worker, address: 10.0.0.21, mac: "52:54:00:00:00:21"}
- {name: w2, role: worker, address: 10.0.0.22}
`

// newFleet writes a fleet's files into a directory of its own and
// returns it with its config CA's pin, the machines'.
func newFleet(t *testing.T) (dir, pin string) {
	t.Helper()
	desc := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(desc, []byte(fleetText), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := fleet.Load(desc)
	if err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(t.TempDir(), "fleet")
	p, err := fleet.NewPlan(d, dir)
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.Write()
	if err != nil {
		t.Fatal(err)
	}
	return dir, r.ConfigCAHash
}

// serve runs `config serve`'s handler over TLS on the loopback, with a
// certificate of dir's CA, and returns its base URL and its log.
func serve(t *testing.T, dir string) (string, *testsupport.SyncBuffer) {
	t.Helper()
	log := &testsupport.SyncBuffer{}
	cfg, err := fleet.ServingTLS(dir, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(fleet.Server{Dir: dir, Log: func(format string, args ...any) { _, _ = fmt.Fprintf(log, format+"\n", args...) }})
	srv.TLS = cfg
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL, log
}

// machine is w1, by its MAC address, host name and address.
var machine = nodefile.Machine{MAC: "52:54:00:00:00:21", Hostname: "w1", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.21")}}

// fetch fetches with a second's patience, counting the retries.
func fetch(t *testing.T, src nodefile.Source, m nodefile.Machine) ([]byte, int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
	defer cancel()
	retries := 0
	data, err := nodefile.Fetch(ctx, src, m, func(error, time.Duration) { retries++ })
	return data, retries, err
}

// TestFetch: a machine gets its own file by MAC address or host name,
// verified; another CA's server, a changed file and another machine's file
// are refused at once (exit 2), while no file yet and no server are
// retried.
func TestFetch(t *testing.T) {
	dir, pin := newFleet(t)
	base, log := serve(t, dir)
	want, err := os.ReadFile(filepath.Join(dir, "nodes/w1.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, url := range []string{base + fleet.NodeFilePath + "?mac={mac}", base + fleet.NodeFilePath + "?hostname={hostname}"} {
		data, retries, err := fetch(t, nodefile.Source{URL: url, CAHash: pin}, machine)
		if err != nil || string(data) != string(want) || retries != 0 {
			t.Errorf("%s: %d retries, %v:\n%s", url, retries, err, data)
		}
	}
	if !strings.Contains(log.String(), `mac="52:54:00:00:00:21" hostname="": served nodes/w1.yaml`) ||
		!strings.Contains(log.String(), `mac="" hostname="w1": served nodes/w1.yaml`) {
		t.Errorf("the server's log:\n%s", log)
	}

	refused := func(name string, src nodefile.Source, m nodefile.Machine, wantMsg string) {
		t.Helper()
		_, retries, err := fetch(t, src, m)
		if exit.Code(err) != exit.Usage || retries != 0 || !strings.Contains(err.Error(), wantMsg) {
			t.Errorf("%s: exit %d after %d retries: %v, want a usage error with %q", name, exit.Code(err), retries, err, wantMsg)
		}
	}
	byName := nodefile.Source{URL: base + fleet.NodeFilePath + "?hostname={hostname}", CAHash: pin}
	otherDir, otherPin := newFleet(t)
	refused("another fleet's pin", nodefile.Source{URL: byName.URL, CAHash: otherPin}, machine, "was not issued by the CA that "+otherPin+" pins")
	otherBase, _ := serve(t, otherDir)
	refused("another fleet's server", nodefile.Source{URL: otherBase + fleet.NodeFilePath + "?hostname={hostname}", CAHash: pin}, machine, "was not issued by the CA")
	w2 := machine
	w2.Hostname = "w2"
	refused("w2's file on w1", byName, w2, "the file is for the node at 10.0.0.22, which is none of this machine's addresses")
	if err := os.WriteFile(filepath.Join(dir, "nodes/w1.yaml"), append(want, "# changed\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	refused("a changed file", byName, machine, "the node file is not signed by the fleet's config CA")

	unknown := machine
	unknown.Hostname, unknown.MAC = "w9", "52:54:00:00:00:99"
	if _, retries, err := fetch(t, byName, unknown); exit.Code(err) == exit.Usage || retries == 0 || !strings.Contains(err.Error(), "404 Not Found: no node file for") {
		t.Errorf("a machine the fleet lacks: %d retries: %v, want retries of the 404", retries, err)
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := closed.Addr().String()
	_ = closed.Close()
	if _, retries, err := fetch(t, nodefile.Source{URL: "https://" + gone + fleet.NodeFilePath, CAHash: pin}, machine); retries < 1 || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("no server: %d retries: %v", retries, err)
	}
}

// TestFromCmdline: the kernel command line names the URL and the pin;
// one without them names nothing, and a plain-HTTP URL or a bad pin is
// refused.
func TestFromCmdline(t *testing.T) {
	pin := "sha256:" + strings.Repeat("ab", 32)
	src, found, err := nodefile.FromCmdline("BOOT_IMAGE=/vmlinuz ro kubeboot.config=https://10.0.0.1:8443/v1/node-file?mac={mac} kubeboot.config-ca-hash=" + pin + " quiet\n")
	if err != nil || !found || src.URL != "https://10.0.0.1:8443/v1/node-file?mac={mac}" || src.CAHash != pin {
		t.Errorf("got %+v %v %v", src, found, err)
	}
	if got := src.Expand(machine); got != "https://10.0.0.1:8443/v1/node-file?mac=52%3A54%3A00%3A00%3A00%3A21" {
		t.Errorf("expanded: %s", got)
	}
	if _, found, err := nodefile.FromCmdline("BOOT_IMAGE=/vmlinuz ro quiet"); found || err != nil {
		t.Errorf("a command line without kubeboot's: %v %v", found, err)
	}
	for _, line := range []string{"kubeboot.config=http://10.0.0.1/x kubeboot.config-ca-hash=" + pin, "kubeboot.config=https://10.0.0.1/x", "kubeboot.config=https://10.0.0.1/x kubeboot.config-ca-hash=sha256:12"} {
		var usage *exit.UsageError
		if _, _, err := nodefile.FromCmdline(line); !errors.As(err, &usage) || !strings.Contains(err.Error(), "kernel command line") {
			t.Errorf("%q: %v", line, err)
		}
	}
}
