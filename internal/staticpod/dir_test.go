package staticpod

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/kubeboot/kubeboot/internal/exit"
)

func TestValidateDir(t *testing.T) {
	apiserver := readAPIServerManifest(t)
	etcd := []byte(manifest)
	backup := Finding{Message: "looks like a backup or editor copy, which the kubelet loads like any manifest (it reads every file not starting with a dot): move it out of the directory"}
	duplicateAPIServer := Finding{Field: "metadata.name", Message: "pod kube-system/kube-apiserver is also defined in kube-apiserver.yaml: the kubelet runs only one of them"}
	// stub is a pod that decodes, and so is looked at further.
	stub := []byte("apiVersion: v1\nkind: Pod\n")
	stubErrors := []Finding{
		{Field: "metadata.name", Message: "required: the kubelet rejects a static pod without a name"},
		{Field: "spec.containers", Message: "required: a pod needs at least one container"},
	}
	stubWarnings := []Finding{{Field: "metadata.namespace", Message: `not set: the kubelet puts the pod in namespace "default"`}}
	extension := Finding{Message: "the name does not end in .yaml, .yml or .json, but the kubelet loads it as a manifest all the same"}

	tests := []struct {
		name string
		fsys fstest.MapFS
		want []Result
	}{
		{
			name: "clean, with kubeboot's dot-prefixed temporary file",
			fsys: fstest.MapFS{
				"etcd.yaml":                 {Data: etcd},
				"kube-apiserver.yaml":       {Data: apiserver},
				".kube-apiserver.yaml.tmp1": {Data: []byte("half-writ")},
			},
			want: []Result{{File: "etcd.yaml", Accepted: true}, {File: "kube-apiserver.yaml", Accepted: true}},
		},
		{
			name: "backup copy runs as a second pod",
			fsys: fstest.MapFS{
				"kube-apiserver.yaml":     {Data: apiserver},
				"kube-apiserver.yaml.bak": {Data: apiserver},
			},
			want: []Result{
				{File: "kube-apiserver.yaml", Accepted: true},
				{File: "kube-apiserver.yaml.bak", Errors: []Finding{backup, duplicateAPIServer}},
			},
		},
		{
			name: "editor and package manager leftovers",
			fsys: fstest.MapFS{
				"#etcd.yaml#":              {Data: etcd},
				"etcd.yaml.dpkg-old":       {Data: stub},
				"kube-scheduler.yaml~":     {Data: stub},
				"kube-scheduler.yaml.ORIG": {Data: stub},
			},
			want: []Result{
				{File: "#etcd.yaml#", Errors: []Finding{backup}},
				{File: "etcd.yaml.dpkg-old", Errors: append([]Finding{backup}, stubErrors...), Warnings: stubWarnings},
				{File: "kube-scheduler.yaml.ORIG", Errors: append([]Finding{backup}, stubErrors...), Warnings: stubWarnings},
				{File: "kube-scheduler.yaml~", Errors: append([]Finding{backup}, stubErrors...), Warnings: stubWarnings},
			},
		},
		{
			name: "same pod in two manifests",
			fsys: fstest.MapFS{
				"apiserver.yaml":      {Data: apiserver},
				"kube-apiserver.yaml": {Data: apiserver},
			},
			want: []Result{
				{File: "apiserver.yaml", Accepted: true},
				{File: "kube-apiserver.yaml", Errors: []Finding{{Field: "metadata.name", Message: "pod kube-system/kube-apiserver is also defined in apiserver.yaml: the kubelet runs only one of them"}}},
			},
		},
		{
			name: "subdirectory is ignored by the kubelet",
			fsys: fstest.MapFS{
				"etcd.yaml":          {Data: etcd},
				"old/etcd.yaml":      {Data: etcd},
				".git/HEAD":          {Data: []byte("ref: refs/heads/main\n")},
				"kube-apiserver.yml": {Data: apiserver},
			},
			want: []Result{
				{File: "etcd.yaml", Accepted: true},
				{File: "kube-apiserver.yml", Accepted: true},
				{File: "old", Accepted: true, Warnings: []Finding{{Message: "subdirectory: the kubelet does not look inside it, so the manifests in it never run"}}},
			},
		},
		{
			name: "file over 10 MiB",
			fsys: fstest.MapFS{"etcd.yaml": {Data: []byte(manifest + "# " + strings.Repeat("x", maxManifestSize))}},
			want: []Result{{File: "etcd.yaml", Errors: []Finding{{Message: "larger than 10 MiB: the kubelet refuses to read it"}}}},
		},
		{
			name: "foreign files",
			fsys: fstest.MapFS{
				"etcd.manifest": {Data: etcd},
				"README":        {Data: []byte("These manifests are managed by kubeboot.\n")},
				"kubelet.sock":  {Mode: fs.ModeSocket},
			},
			want: []Result{
				{File: "README", Errors: []Finding{{Message: "decode pod: json: cannot unmarshal string into Go value of type v1.TypeMeta"}}, Warnings: []Finding{extension}},
				{File: "etcd.manifest", Accepted: true, Warnings: []Finding{extension}},
				{File: "kubelet.sock", Accepted: true, Warnings: []Finding{{Message: "not a regular file: the kubelet skips it"}}},
			},
		},
		{
			name: "symbolic links are followed",
			fsys: fstest.MapFS{
				"etcd.yaml":           {Mode: fs.ModeSymlink, Data: []byte("store/etcd-v2.yaml")},
				"kube-apiserver.yaml": {Mode: fs.ModeSymlink, Data: []byte("store/missing.yaml")},
				"store/etcd-v2.yaml":  {Data: etcd},
			},
			want: []Result{
				{File: "etcd.yaml", Accepted: true},
				{File: "kube-apiserver.yaml", Errors: []Finding{{Message: "cannot be read, so the kubelet skips it: open kube-apiserver.yaml: file does not exist"}}},
				{File: "store", Accepted: true, Warnings: []Finding{{Message: "subdirectory: the kubelet does not look inside it, so the manifests in it never run"}}},
			},
		},
		{
			name: "empty directory",
			fsys: fstest.MapFS{},
			want: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ValidateDir(tt.fsys, testNode)
			if err != nil {
				t.Fatalf("ValidateDir() error = %v", err)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("ValidateDir() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateDirUnreadable(t *testing.T) {
	notADir := fstest.MapFS{".": {Data: []byte("a file, not a directory")}}
	if _, err := ValidateDir(notADir, testNode); err == nil || !strings.HasPrefix(err.Error(), "read manifest directory: ") {
		t.Errorf("ValidateDir(file) error = %v, want a read manifest directory error", err)
	}
}

// TestValidatePaths: a file is validated as the kubelet decodes it, a
// directory as the kubelet reads it, with each finding named by its path;
// a file larger than the kubelet reads is a finding, a missing path a
// usage error.
func TestValidatePaths(t *testing.T) {
	good, err := os.ReadFile("testdata/kube-apiserver.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	manifests := filepath.Join(dir, "manifests")
	if err := os.Mkdir(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		filepath.Join(dir, "single.yaml"):    good,
		filepath.Join(manifests, "api.yaml"): good,
		filepath.Join(manifests, "bad.yaml"): []byte("kind: Pod\napiVersion: v1\nmetadata: {name: x}\nspec: {containers: [{name: c, image: i, envFrom: [{configMapRef: {name: cm}}]}]}\n"),
		filepath.Join(dir, "huge.yaml"):      make([]byte, 10<<20+1),
	}
	for path, data := range files {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	results, err := ValidatePaths([]string{filepath.Join(dir, "single.yaml"), manifests, filepath.Join(dir, "huge.yaml")}, "node1")
	if err != nil {
		t.Fatal(err)
	}
	byFile := map[string]Result{}
	for _, r := range results {
		byFile[r.File] = r
	}
	if r := byFile[filepath.Join(dir, "single.yaml")]; len(r.Errors) != 0 {
		t.Errorf("a good manifest: %+v", r)
	}
	if r := byFile[filepath.Join(manifests, "api.yaml")]; len(r.Errors) != 0 {
		t.Errorf("a good manifest in the directory, under its path: %+v (all: %v)", r, results)
	}
	if r := byFile[filepath.Join(manifests, "bad.yaml")]; len(r.Errors) == 0 {
		t.Errorf("a manifest that references a ConfigMap passed: %+v (all: %v)", r, results)
	}
	if r := byFile[filepath.Join(dir, "huge.yaml")]; len(r.Errors) != 1 || !strings.Contains(r.Errors[0].Message, "larger than 10 MiB") {
		t.Errorf("a file larger than the kubelet reads: %+v", r)
	}
	_, err = ValidatePaths([]string{filepath.Join(dir, "missing.yaml")}, "node1")
	if exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), "no such file or directory") {
		t.Errorf("a missing path: %v (exit code %d)", err, exit.Code(err))
	}
}
