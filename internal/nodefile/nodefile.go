// Package nodefile fetches a node's file for a machine whose disk holds
// none: from the URL given on kubeboot's command line or the kernel's
// (kubeboot.config=), where {mac} and {hostname} stand for the machine's,
// over HTTPS from a server whose certificate the fleet's config CA issued
// (that CA pinned by its hash, kubeboot.config-ca-hash=), with the config
// CA's signature of the file (`kubeboot config serve` serves both). Nothing
// unverified is returned, and a file its node would refuse, or that
// names another machine's address, is refused without a retry.
package nodefile

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubeboot/kubeboot/internal/atomicfile"
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/fleet"
	"github.com/kubeboot/kubeboot/pki"
)

// The kernel command line's parameters that say where a node's file is.
const (
	URLParam    = "kubeboot.config"
	CAHashParam = "kubeboot.config-ca-hash"
)

// maxSize bounds a node file fetched, as the configuration's loader
// bounds one read from disk.
const maxSize = 1 << 20

// Source is where a node's file comes from.
type Source struct {
	// URL is an https URL, in which {mac} and {hostname} stand for the
	// machine's.
	URL string
	// CAHash pins the fleet's config CA: sha256:<hex> of its public key,
	// in the form of the nodes' caCertHashes.
	CAHash string
}

// FromCmdline reads a Source from a kernel command line; found is false
// when it names none.
func FromCmdline(cmdline string) (src Source, found bool, err error) {
	for _, field := range strings.Fields(cmdline) {
		key, value, _ := strings.Cut(field, "=")
		switch key {
		case URLParam:
			src.URL = value
		case CAHashParam:
			src.CAHash = value
		}
	}
	if src.URL == "" && src.CAHash == "" {
		return src, false, nil
	}
	return src, true, src.check("the kernel command line's " + URLParam + "= and " + CAHashParam + "=")
}

// check refuses a source that is not an https URL with the CA's pin;
// where says where it was given.
func (s Source) check(where string) error {
	u, err := url.Parse(s.URL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return &exit.UsageError{Msg: fmt.Sprintf("%s: the node file's URL %s is not https://host[:port]/path: the file holds secrets and is fetched over HTTPS alone", where, config.RedactedURL(s.URL))}
	}
	if !strings.HasPrefix(s.CAHash, "sha256:") || len(s.CAHash) != len("sha256:")+64 {
		return &exit.UsageError{Msg: fmt.Sprintf("%s: the CA's pin %q is not sha256:<64 hex digits>: give the fleet's, from `kubeboot config fleet` (its config-ca-hash)", where, s.CAHash)}
	}
	return nil
}

// Check refuses a source given on kubeboot's command line that is not an
// https URL with the CA's pin.
func (s Source) Check() error { return s.check("--config-url and --config-ca-hash") }

// Machine is what the URL may name of this machine, and the addresses a
// node file of it may name.
type Machine struct {
	// MAC is the hardware address of the interface of the default route
	// (or the first that is up), lower-case.
	MAC string
	// Hostname is the machine's host name.
	Hostname string
	// Addresses are its interfaces' IP addresses.
	Addresses []netip.Addr
}

// DetectMachine reads this machine's host name, MAC address and
// addresses.
func DetectMachine() (Machine, error) {
	var m Machine
	host, err := os.Hostname()
	if err != nil {
		return m, err
	}
	m.Hostname = strings.ToLower(host)
	ifaces, err := net.Interfaces()
	if err != nil {
		return m, err
	}
	route := defaultRouteInterface()
	for _, iface := range ifaces {
		if iface.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := iface.Addrs()
		if err != nil {
			return m, err
		}
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				m.Addresses = append(m.Addresses, p.Addr())
			}
		}
		if len(iface.HardwareAddr) == 6 && iface.Flags&net.FlagUp != 0 && (m.MAC == "" || iface.Name == route) {
			m.MAC = iface.HardwareAddr.String()
		}
	}
	return m, nil
}

// defaultRouteInterface is the interface of the IPv4 default route, from
// /proc/net/route; "" without one.
func defaultRouteInterface() string {
	data, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n")[1:] {
		if f := strings.Fields(line); len(f) > 2 && f[1] == "00000000" {
			return f[0]
		}
	}
	return ""
}

// Expand fills the URL's {mac} and {hostname} with the machine's.
func (s Source) Expand(m Machine) string {
	return strings.NewReplacer("{mac}", url.QueryEscape(m.MAC), "{hostname}", url.QueryEscape(m.Hostname)).Replace(s.URL)
}

// retryableError is a fetch that another attempt may complete: the server
// unreachable, failing, or holding no file for this machine yet.
type retryableError struct{ err error }

func (e *retryableError) Error() string { return e.err.Error() }
func (e *retryableError) Unwrap() error { return e.err }

// Fetch fetches the machine's file and verifies it: the server's
// certificate issued by the CA that CAHash pins, the file signed by that
// CA, loadable as a node's configuration, and naming one of the
// machine's addresses. A failure another attempt may fix is retried with
// a backoff (1 s doubling to a minute) until ctx ends, each said by
// retrying; any other is returned at once, as a usage error.
func Fetch(ctx context.Context, src Source, m Machine, retrying func(err error, next time.Duration)) ([]byte, error) {
	target := src.Expand(m)
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Steps: 1 << 30, Cap: time.Minute}
	for {
		data, err := fetchOnce(ctx, target, src.CAHash)
		var retry *retryableError
		if err == nil {
			return data, checkFile(data, target, m)
		}
		if !errors.As(err, &retry) {
			return nil, err
		}
		next := backoff.Step()
		retrying(err, next)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(next):
		}
	}
}

// fetchOnce GETs target, pinning the CA, and checks the file's
// signature.
func fetchOnce(ctx context.Context, target, caHash string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, &exit.UsageError{Msg: fmt.Sprintf("the node file's URL %s: %v", config.RedactedURL(target), err)}
	}
	host := req.URL.Hostname()
	var ca *x509.Certificate
	transport := &http.Transport{TLSClientConfig: &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The chain is checked against the pinned CA below, as kubeadm's
		// discovery checks cluster-info's: the machine holds no CA yet.
		InsecureSkipVerify: true, //nolint:gosec // verified by VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			var err error
			ca, err = verifyPinned(cs, host, caHash)
			return err
		},
	}}
	defer transport.CloseIdleConnections()
	resp, err := (&http.Client{Transport: transport, Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		var pinned *pinError
		if errors.As(err, &pinned) {
			return nil, &exit.UsageError{Msg: fmt.Sprintf("%s: %v", config.RedactedURL(target), pinned)}
		}
		return nil, &retryableError{fmt.Errorf("fetch %s: %w", config.RedactedURL(target), err)}
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxSize+1))
	switch {
	case err != nil:
		return nil, &retryableError{fmt.Errorf("fetch %s: %w", config.RedactedURL(target), err)}
	case resp.StatusCode != http.StatusOK:
		return nil, &retryableError{fmt.Errorf("fetch %s: %s: %s", config.RedactedURL(target), resp.Status, strings.TrimSpace(string(body)))}
	case len(body) > maxSize:
		return nil, &exit.UsageError{Msg: fmt.Sprintf("%s: the node file is over %d bytes", config.RedactedURL(target), maxSize)}
	}
	if err := fleet.Verify(ca, body, resp.Header.Get(fleet.SignatureHeader)); err != nil {
		return nil, &exit.UsageError{Msg: fmt.Sprintf("%s: the node file is not signed by the fleet's config CA (%v): it was changed after `kubeboot config fleet` wrote it; write it again with config fleet", config.RedactedURL(target), err)}
	}
	return body, nil
}

// pinError is a server whose certificate the pinned CA did not issue.
type pinError struct{ msg string }

func (e *pinError) Error() string { return e.msg }

// verifyPinned finds the CA of caHash among the certificates the server
// sent and verifies the server's certificate, for host, against it alone.
func verifyPinned(cs tls.ConnectionState, host, caHash string) (*x509.Certificate, error) {
	if len(cs.PeerCertificates) == 0 {
		return nil, &pinError{"the server sent no certificate"}
	}
	for _, cert := range cs.PeerCertificates[1:] {
		hash, err := pki.CACertHash(pemOf(cert))
		if err != nil || hash != caHash {
			continue
		}
		roots := x509.NewCertPool()
		roots.AddCert(cert)
		if _, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
			return nil, &pinError{fmt.Sprintf("the server's certificate is not the fleet config CA's for this address: %v", err)}
		}
		return cert, nil
	}
	return nil, &pinError{fmt.Sprintf("the server's certificate was not issued by the CA that %s pins: it is another fleet's server, or the pin is another fleet's", caHash)}
}

// pemOf is a certificate in PEM, as pki.CACertHash reads it.
func pemOf(cert *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
}

// checkFile loads the file as its node will, and refuses one that names
// none of the machine's addresses: another machine's file.
func checkFile(data []byte, from string, m Machine) error {
	var host config.Host
	host.Name = m.Hostname
	doc, err := config.Parse(config.RedactedURL(from), data, config.Env{Host: host})
	if err != nil {
		return err
	}
	var address string
	switch {
	case doc.Worker != nil:
		address = doc.Worker.Node.Address
	default:
		address = doc.ControlPlane().Node.AdvertiseAddress
	}
	if address == "" {
		return nil
	}
	want, err := netip.ParseAddr(address)
	if err != nil {
		return &exit.UsageError{Msg: fmt.Sprintf("%s: the node's address %q is no IP address", config.RedactedURL(from), address)}
	}
	for _, a := range m.Addresses {
		if a == want {
			return nil
		}
	}
	return &exit.UsageError{Msg: fmt.Sprintf("%s: the file is for the node at %s, which is none of this machine's addresses (%v; host name %s, MAC %s): "+
		"the server gave this machine another node's file; check that machine's mac or name in the fleet's description", config.RedactedURL(from), address, m.Addresses, m.Hostname, m.MAC)}
}

// Write installs a fetched node file at path, mode 0600 (it holds the
// join token), whole or not at all.
func Write(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, data, 0o600)
}
