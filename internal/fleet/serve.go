package fleet

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/pki"
)

// NodeFilePath is the path under which `kubeboot config serve` serves a
// machine its file: ?mac=<mac> finds it by the fleet's MAC addresses,
// ?hostname=<name> by node name; a machine may give both, the MAC first.
const NodeFilePath = "/v1/node-file"

// Server serves a fleet's directory, as `kubeboot config serve` does: to
// each machine its node file with the file's signature. It reads the
// directory at every request, so a node that `config fleet` adds is
// served at once.
type Server struct {
	// Dir is the fleet's directory, as `config fleet --out` wrote it.
	Dir string
	// Log says what each request was served.
	Log func(format string, args ...any)
}

// ServeHTTP answers GET NodeFilePath.
func (s Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != NodeFilePath || r.Method != http.MethodGet {
		s.Log("%s: %s %s: not found", r.RemoteAddr, r.Method, r.URL.Path)
		http.Error(w, "not found: GET "+NodeFilePath+"?mac=<mac>&hostname=<name>", http.StatusNotFound)
		return
	}
	mac, host := strings.ToLower(r.URL.Query().Get("mac")), r.URL.Query().Get("hostname")
	asked := fmt.Sprintf("mac=%q hostname=%q", mac, host)
	name, err := s.lookup(mac, host)
	if err != nil {
		s.Log("%s: %s: %v", r.RemoteAddr, asked, err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if name == "" {
		s.Log("%s: %s: no node of the fleet has that MAC address or name", r.RemoteAddr, asked)
		http.Error(w, fmt.Sprintf("no node file for %s: add the machine to the fleet's description (its mac, or its host name as name) and run `kubeboot config fleet` again", asked), http.StatusNotFound)
		return
	}
	file := nodePath(name)
	data, err := os.ReadFile(filepath.Join(s.Dir, file))
	if err == nil {
		var sig []byte
		if sig, err = os.ReadFile(filepath.Join(s.Dir, file+sigExt)); err == nil {
			s.Log("%s: %s: served %s (%d bytes)", r.RemoteAddr, asked, file, len(data))
			w.Header().Set(SignatureHeader, strings.TrimSpace(string(sig)))
			w.Header().Set("Content-Type", "application/yaml")
			_, _ = w.Write(data)
			return
		}
	}
	s.Log("%s: %s: %v", r.RemoteAddr, asked, err)
	http.Error(w, "node "+name+"'s file cannot be read", http.StatusInternalServerError)
}

// lookup finds the node a machine asks for: by its MAC address in
// MACsFile, else by its host name among the node files; "" if none.
func (s Server) lookup(mac, host string) (string, error) {
	if mac != "" {
		macs, err := os.ReadFile(filepath.Join(s.Dir, MACsFile))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		for _, line := range strings.Split(string(macs), "\n") {
			if m, name, ok := strings.Cut(line, " "); ok && m == mac {
				return name, nil
			}
		}
	}
	if host == "" || len(validation.IsDNS1123Subdomain(host)) > 0 {
		return "", nil
	}
	if _, err := os.Stat(filepath.Join(s.Dir, nodePath(host))); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		return "", err
	}
	return host, nil
}

// serveValidity is how long the serving certificate of `config serve`
// lives; a new one is issued at each start.
const serveValidity = 365 * 24 * time.Hour

// ServingTLS is the TLS configuration of `config serve`: a serving
// certificate for names (IP addresses or DNS names), issued by the
// fleet's config CA at each start, sent with the config CA's certificate
// so that a machine can check it against the config CA's pin.
func ServingTLS(dir string, names []string) (*tls.Config, error) {
	cert, err := os.ReadFile(filepath.Join(dir, ConfigCACertFile))
	if err != nil {
		return nil, fmt.Errorf("%s: read the fleet's config CA (run `kubeboot config fleet --out %s` first): %w", dir, dir, err)
	}
	key, err := os.ReadFile(filepath.Join(dir, ConfigCAKeyFile))
	if err != nil {
		return nil, fmt.Errorf("%s: read the fleet's config CA key: %w", dir, err)
	}
	spec := pki.CertSpec{Name: "config-serve", CN: "kubeboot-config-serve", Usage: pki.UsageServer, CA: configCASpec.Name,
		Algorithm: config.ECDSAP256, Validity: serveValidity}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			spec.IPs = append(spec.IPs, ip)
		} else {
			spec.DNS = append(spec.DNS, n)
		}
	}
	pair, err := pki.Issue(spec, pki.KeyPair{Cert: cert, Key: key}, nil)
	if err != nil {
		return nil, err
	}
	serving, err := tls.X509KeyPair(append(append([]byte{}, pair.Cert...), cert...), pair.Key)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{serving}, MinVersion: tls.VersionTLS12}, nil
}
