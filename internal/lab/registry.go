package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kubeboot/kubeboot/internal/atomicfile"
)

// DefaultRegistry is where every lab that is up is registered, a file
// each, so that `lab list` finds them and `lab up` refuses one that would
// collide with another. It is in /run, since labs do not outlive a
// reboot, and a directory of the labs' own, not a node's (a node's
// kubeboot keeps its lock in /run/kubeboot): the last lab down removes it.
const DefaultRegistry = "/run/kubeboot-labs"

// InputError is Up's refusal of a lab, before anything was set up, for
// what its description says or the labs it would collide with: the
// command exits 2.
type InputError struct{ Err error }

// Error is the refusal's reason.
func (e *InputError) Error() string { return e.Err.Error() }

// Unwrap is the refusal's reason, for errors.Is and errors.As.
func (e *InputError) Unwrap() error { return e.Err }

// Entry is one lab that is up, as `lab list` shows it.
type Entry struct {
	Name string `json:"name"`
	// Description is the lab description's path.
	Description string   `json:"description"`
	Dir         string   `json:"dir"`
	Subnet      string   `json:"subnet"`
	PodSubnet   string   `json:"podSubnet"`
	Nodes       []string `json:"nodes"`
	// Endpoint is the load balancer's address on the host's loopback,
	// once it is known.
	Endpoint string `json:"endpoint,omitempty"`
	// HostPorts are the ports of its port mappings on the host's loopback.
	HostPorts []int     `json:"hostPorts,omitempty"`
	Started   time.Time `json:"started"`
}

// List is the labs registered in registry, by name. A registry that does
// not exist holds none.
func List(registry string) ([]Entry, error) {
	paths, err := filepath.Glob(filepath.Join(registry, "*.json"))
	if err != nil {
		return nil, err
	}
	var entries []Entry
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // brought down meanwhile
		}
		if err != nil {
			return nil, err
		}
		var e Entry
		if err := json.Unmarshal(data, &e); err != nil {
			return nil, fmt.Errorf("lab registry %s: %w", path, err)
		}
		entries = append(entries, e)
	}
	slices.SortFunc(entries, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	return entries, nil
}

// entry is the lab's registry entry as Up starts it.
func (l Lab) entry() Entry {
	c := l.Cluster
	e := Entry{Name: c.Name, Description: c.source, Dir: c.Dir, Subnet: c.Subnet, PodSubnet: c.PodSubnet, Started: time.Now().UTC()}
	if abs, err := filepath.Abs(c.source); err == nil {
		e.Description = abs
	}
	for _, n := range c.Nodes {
		e.Nodes = append(e.Nodes, n.Name)
	}
	for _, p := range c.PortMappings {
		e.HostPorts = append(e.HostPorts, p.HostPort)
	}
	return e
}

// checkCollisions refuses a lab whose name, directory, subnet, pod
// subnet or a port mapping's host port another lab that is up already
// has, naming the field, the other lab and the fix.
func (l Lab) checkCollisions() error {
	others, err := List(l.Registry)
	if err != nil {
		return err
	}
	c := l.Cluster
	for _, o := range others {
		for i, p := range c.PortMappings {
			if slices.Contains(o.HostPorts, p.HostPort) {
				return fmt.Errorf("%s: portMappings[%d].hostPort: %d collides with lab %s, which is up (%s) and maps it: choose another hostPort, or bring that lab down (`kubeboot lab down --cluster %s`)",
					c.source, i, p.HostPort, o.Name, o.Description, o.Description)
			}
		}
		var field, value string
		switch {
		case o.Name == c.Name:
			field, value = "name", c.Name
		case filepath.Clean(o.Dir) == filepath.Clean(c.Dir):
			field, value = "dir", c.Dir
		case overlap(o.Subnet, c.Subnet):
			field, value = "subnet", c.Subnet
		case overlap(o.PodSubnet, c.PodSubnet):
			field, value = "podSubnet", c.PodSubnet
		default:
			continue
		}
		return fmt.Errorf("%s: %s: %q collides with lab %s, which is up (%s, %s %s): choose another %s, or bring that lab down (`kubeboot lab down --cluster %s`)",
			c.source, field, value, o.Name, o.Description, field, registered(o, field), field, o.Description)
	}
	return nil
}

// registered is an entry's value of a colliding field.
func registered(e Entry, field string) string {
	switch field {
	case "name":
		return e.Name
	case "dir":
		return e.Dir
	case "subnet":
		return e.Subnet
	}
	return e.PodSubnet
}

// overlap says whether two lists of CIDRs (comma-separated, as a
// dual-stack lab's) share an address; one that does not parse shares
// none.
func overlap(a, b string) bool {
	for x := range strings.SplitSeq(a, ",") {
		for y := range strings.SplitSeq(b, ",") {
			px, errX := netip.ParsePrefix(strings.TrimSpace(x))
			py, errY := netip.ParsePrefix(strings.TrimSpace(y))
			if errX == nil && errY == nil && px.Overlaps(py) {
				return true
			}
		}
	}
	return false
}

// register writes the lab's entry into the registry, whole or not at all
// (package atomicfile).
// The registry's directory is made again when the last other lab's
// unregister removed it meanwhile.
func (l Lab) register(e Entry) error {
	data, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return err
	}
	path := l.entryPath()
	for attempt := 0; ; attempt++ {
		if err := os.MkdirAll(l.Registry, 0o755); err != nil {
			return fmt.Errorf("lab registry: %w", err)
		}
		err := atomicfile.WriteFile(path, append(data, '\n'), 0o644)
		if err == nil {
			return nil
		}
		if !errors.Is(err, fs.ErrNotExist) || attempt == 3 {
			return fmt.Errorf("lab registry: %w", err)
		}
	}
}

// unregister removes the lab's entry, and the registry's directory once
// it is empty.
func (l Lab) unregister() error {
	if err := os.Remove(l.entryPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("lab registry: %w", err)
	}
	_ = os.Remove(l.Registry) // only once empty
	return nil
}

func (l Lab) entryPath() string { return filepath.Join(l.Registry, l.Cluster.Name+".json") }
