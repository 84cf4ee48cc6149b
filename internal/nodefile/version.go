package nodefile

import (
	"bytes"
	"fmt"
	"os"
	"regexp"

	sigsyaml "sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/atomicfile"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/inputfile"
)

// maxFileSize bounds a node's file read to move its version.
const maxFileSize = 1 << 20

// versionLine matches a top-level kubernetesVersion line, and kindLine the
// top-level kind line a line is added after when there is none.
var (
	versionLine = regexp.MustCompile(`(?m)^kubernetesVersion:[^\n]*$`)
	kindLine    = regexp.MustCompile(`(?m)^kind:[^\n]*\n`)
)

// SetKubernetesVersion moves the control-plane node's file at path to the
// release version, as an upgrade of the node needs before it renders that
// release: its top-level kubernetesVersion line replaced, or one added
// after its kind line, every other byte kept. It reports whether the file
// changed. A file whose result would not say that release is refused and
// left as it was; the new file replaces the old whole, with its mode.
func SetKubernetesVersion(path, version string) (bool, error) {
	data, err := inputfile.Read(path, maxFileSize)
	if err != nil {
		return false, err
	}
	info, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	var next []byte
	switch lines := versionLine.FindAllIndex(data, -1); len(lines) {
	case 0:
		kind := kindLine.FindIndex(data)
		if kind == nil {
			return false, &exit.UsageError{Msg: fmt.Sprintf("%s: no top-level kind line to add kubernetesVersion: %s after: set kubernetesVersion in the file by hand", path, version)}
		}
		next = bytes.Join([][]byte{data[:kind[1]], []byte("kubernetesVersion: " + version + "\n"), data[kind[1]:]}, nil)
	case 1:
		next = bytes.Join([][]byte{data[:lines[0][0]], []byte("kubernetesVersion: " + version), data[lines[0][1]:]}, nil)
	default:
		return false, &exit.UsageError{Msg: fmt.Sprintf("%s: %d top-level kubernetesVersion lines: leave one, then run again", path, len(lines))}
	}
	var doc struct {
		KubernetesVersion string `json:"kubernetesVersion"`
	}
	if err := sigsyaml.Unmarshal(next, &doc); err != nil || doc.KubernetesVersion != version {
		return false, &exit.UsageError{Msg: fmt.Sprintf("%s: kubernetesVersion cannot be moved to %s in place (the file would say %q: %v): set it by hand", path, version, doc.KubernetesVersion, err)}
	}
	if bytes.Equal(next, data) {
		return false, nil
	}
	return true, atomicfile.WriteFile(path, next, info.Mode().Perm())
}
