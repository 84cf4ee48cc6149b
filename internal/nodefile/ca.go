package nodefile

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	sigsyaml "sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/atomicfile"
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/inputfile"
)

// ReplaceCA moves the control-plane node's file at path from the cluster
// CA old (its certificates.ca, as `config fleet` writes the first node's)
// to next, as a CA rotation needs once the node signs with next: each PEM
// block scalar of old's certificate and key is replaced line by line,
// at its indentation, every other byte kept. It reports whether the file
// changed. A file whose result would not hold next is refused and left as
// it was; the new file replaces the old whole, with its mode.
func ReplaceCA(path string, old, next config.CertificateAuthority) (bool, error) {
	data, err := inputfile.Read(path, maxFileSize)
	if err != nil {
		return false, err
	}
	info, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	out := replaceBlock(replaceBlock(data, old.Cert, next.Cert), old.Key, next.Key)
	var doc struct {
		Certificates struct {
			CA *config.CertificateAuthority `json:"ca"`
		} `json:"certificates"`
	}
	if err := sigsyaml.Unmarshal(out, &doc); err != nil || doc.Certificates.CA == nil || *doc.Certificates.CA != next {
		return false, &exit.UsageError{Msg: fmt.Sprintf("%s: certificates.ca cannot be moved to the rotated CA in place: set it by hand to %s's certificate and key (or remove it, once the node is up)", path, config.CertCA)}
	}
	if bytes.Equal(out, data) {
		return false, nil
	}
	return true, atomicfile.WriteFile(path, out, info.Mode().Perm())
}

// replaceBlock replaces the lines of the PEM text old, found in data as a
// run of lines of one indentation, by those of next at that indentation.
func replaceBlock(data []byte, old, next string) []byte {
	oldLines := strings.Split(strings.TrimRight(old, "\n"), "\n")
	lines := strings.SplitAfter(string(data), "\n")
	for i := range lines {
		indent, ok := strings.CutSuffix(strings.TrimRight(lines[i], "\n"), oldLines[0])
		if !ok || strings.TrimLeft(indent, " ") != "" || i+len(oldLines) > len(lines) {
			continue
		}
		match := true
		for j, l := range oldLines {
			if strings.TrimRight(lines[i+j], "\n") != indent+l {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		var repl []string
		for _, l := range strings.Split(strings.TrimRight(next, "\n"), "\n") {
			repl = append(repl, indent+l+"\n")
		}
		tail := lines[i+len(oldLines):]
		return []byte(strings.Join(lines[:i], "") + strings.Join(repl, "") + strings.Join(tail, ""))
	}
	return data
}
