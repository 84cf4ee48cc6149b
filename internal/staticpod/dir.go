package staticpod

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/inputfile"
)

// backupSuffixes end the names that editors, package managers, merge tools
// and people give to copies of a file. The kubelet loads such a copy like
// any other manifest, so a kube-apiserver.yaml.bak runs a second API server
// pod, or fails to parse and leaves an error in the log every 20 seconds.
var backupSuffixes = []string{
	"~", ".bak", ".backup", ".old", ".orig", ".rej", ".save", ".tmp",
	".swp", ".swo", ".dpkg-old", ".dpkg-new", ".dpkg-dist", ".dpkg-bak",
	".rpmnew", ".rpmsave", ".rpmorig", ".ucf-old", ".ucf-new", ".ucf-dist",
}

// manifestExtensions are the extensions a manifest is expected to have.
// The kubelet does not look at extensions; kubeboot warns about the others
// because a file without one of them is rarely meant as a pod.
var manifestExtensions = []string{".yaml", ".yml", ".json"}

// ValidateDir validates the kubelet's manifest directory fsys as the
// kubelet on node nodeName reads it: every regular file whose name does not
// start with a dot, whatever its extension, following symbolic links,
// without recursing into subdirectories. It returns one Result per entry
// that the kubelet looks at, in name order, and an error only when the
// directory cannot be read at all.
//
// Beyond Validate on each file, the findings are:
//   - errors, because the kubelet would reject the file or misbehave with it:
//     a backup or editor copy (it runs as another pod, or fails to parse),
//     a pod name and namespace defined by an earlier file (the kubelet runs
//     only one of them), a file over 10 MiB (the kubelet refuses it), and an
//     entry that cannot be read, such as a dangling link (its pod never runs);
//   - warnings, because the kubelet skips or runs them as expected but the
//     author may not: a subdirectory or a special file (never read) and a
//     file without a .yaml, .yml or .json extension (read anyway).
//
// Dot files are skipped without a finding: that is how the kubelet ignores
// them, and how kubeboot's temporary files stay out of its sight.
func ValidateDir(fsys fs.FS, nodeName string) ([]Result, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("read manifest directory: %w", err)
	}
	var results []Result
	definedIn := map[string]string{} // "namespace/name" -> the file defining that pod first
	for _, entry := range entries {
		name := entry.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		res, pod := validateEntry(fsys, name, nodeName)
		if pod != nil && pod.Name != "" {
			key := cmp.Or(pod.Namespace, "default") + "/" + pod.Name
			if first, dup := definedIn[key]; dup {
				res.Errors = append(res.Errors, Finding{
					Field:   "metadata.name",
					Message: fmt.Sprintf("pod %s is also defined in %s: the kubelet runs only one of them", key, first),
				})
			} else {
				definedIn[key] = name
			}
		}
		results = append(results, res.finish())
	}
	return results, nil
}

// validateEntry validates one directory entry and returns the pod it
// defines, if any.
func validateEntry(fsys fs.FS, name, nodeName string) (Result, *corev1.Pod) {
	res := Result{File: name}
	var pod *corev1.Pod
	// fs.Stat follows symbolic links, as the kubelet's os.Stat does.
	info, err := fs.Stat(fsys, name)
	switch {
	case err != nil:
		res.Errors = append(res.Errors, Finding{Message: fmt.Sprintf("cannot be read, so the kubelet skips it: %v", err)})
	case info.IsDir():
		res.Warnings = append(res.Warnings, Finding{Message: "subdirectory: the kubelet does not look inside it, so the manifests in it never run"})
		return res, nil
	case !info.Mode().IsRegular():
		res.Warnings = append(res.Warnings, Finding{Message: "not a regular file: the kubelet skips it"})
		return res, nil
	case info.Size() > maxManifestSize:
		res.Errors = append(res.Errors, Finding{Message: "larger than 10 MiB: the kubelet refuses to read it"})
	default:
		data, err := readManifest(fsys, name)
		if err != nil {
			res.Errors = append(res.Errors, Finding{Message: fmt.Sprintf("cannot be read, so the kubelet skips it: %v", err)})
			break
		}
		res, pod = validate(name, data, nodeName)
	}

	lower := strings.ToLower(name)
	isBackup := slices.ContainsFunc(backupSuffixes, func(s string) bool { return strings.HasSuffix(lower, s) }) ||
		strings.HasPrefix(name, "#") // an Emacs auto-save file
	switch {
	case isBackup:
		res.Errors = append([]Finding{{Message: "looks like a backup or editor copy, which the kubelet loads like any manifest (it reads every file not starting with a dot): move it out of the directory"}}, res.Errors...)
	case !slices.Contains(manifestExtensions, path.Ext(lower)):
		res.Warnings = append(res.Warnings, Finding{Message: "the name does not end in .yaml, .yml or .json, but the kubelet loads it as a manifest all the same"})
	}
	return res, pod
}

// readManifest reads one manifest, never more than one byte past the
// kubelet's limit, which decode then reports: a file can be larger than
// its stat said (one under /proc, or one growing).
func readManifest(fsys fs.FS, name string) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	return io.ReadAll(io.LimitReader(f, maxManifestSize+1))
}

// ValidatePaths validates the manifests at paths: a file as the kubelet
// decodes it (one larger than the kubelet reads is a finding), a
// directory as the kubelet reads its manifest directory (ValidateDir),
// each finding named by its file's path. A path that does not exist is a
// usage error.
func ValidatePaths(paths []string, nodeName string) ([]Result, error) {
	var results []Result
	for _, path := range paths {
		info, err := os.Stat(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &exit.UsageError{Msg: fmt.Sprintf("validate %q: no such file or directory: name a manifest or the kubelet's manifest directory", path)}
		}
		if err != nil {
			return nil, fmt.Errorf("validate %q: %w", path, err)
		}
		if !info.IsDir() {
			data, err := inputfile.Read(path, inputfile.ManifestLimit)
			if errors.Is(err, inputfile.ErrTooLarge) {
				results = append(results, Result{File: path, Errors: []Finding{{Message: "larger than 10 MiB: the kubelet refuses to read it"}}, Warnings: []Finding{}})
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("validate %q: %w", path, err)
			}
			results = append(results, Validate(path, data, nodeName))
			continue
		}
		dirResults, err := ValidateDir(os.DirFS(path), nodeName)
		if err != nil {
			return nil, fmt.Errorf("validate %q: %w", path, err)
		}
		for _, r := range dirResults {
			r.File = filepath.Join(path, r.File)
			results = append(results, r)
		}
	}
	return results, nil
}
