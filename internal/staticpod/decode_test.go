package staticpod

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// manifest is a small valid static pod; {{volumes}} and {{extra}} are
// replaced by the cases.
const manifest = `apiVersion: v1
kind: Pod
metadata:
  name: etcd
  namespace: kube-system
  labels: {component: etcd}
spec:
  hostNetwork: true
  containers:
  - name: etcd
    image: registry.k8s.io/etcd:3.6.8-0
    command: [etcd, --data-dir=/var/lib/etcd]
    volumeMounts:
    - {name: etcd-data, mountPath: /var/lib/etcd}
  volumes:
  - name: etcd-data
    hostPath:
      path: /var/lib/etcd
`

func TestValidateDecoding(t *testing.T) {
	tests := []struct {
		name string
		data string
		want Result
	}{
		{
			name: "valid",
			data: manifest,
			want: Result{Accepted: true},
		},
		{
			name: "realistic kube-apiserver",
			data: string(readAPIServerManifest(t)),
			want: Result{Accepted: true},
		},
		{
			name: "leading and trailing document markers",
			data: "---\n" + manifest + "---\n",
			want: Result{Accepted: true},
		},
		{
			name: "JSON",
			data: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"etcd","namespace":"kube-system"},
			       "spec":{"containers":[{"name":"etcd","image":"registry.k8s.io/etcd:3.6.8-0"}]}}`,
			want: Result{Accepted: true},
		},
		{
			name: "YAML 1.1 trap: path n",
			data: strings.Replace(manifest, "path: /var/lib/etcd", "path: n", 1),
			want: Result{Errors: []Finding{{
				Field:   "spec.volumes[0].hostPath.path",
				Message: `YAML 1.1 reads the bare n as the boolean false, which the kubelet cannot decode here: quote it ("n")`,
			}}},
		},
		{
			name: "YAML 1.1 traps in a list and a map",
			data: strings.Replace(strings.Replace(manifest, "--data-dir=/var/lib/etcd]", "On]", 1), "component: etcd", "critical: yes", 1),
			want: Result{Errors: []Finding{
				{Field: "metadata.labels[critical]", Message: `YAML 1.1 reads the bare yes as the boolean true, which the kubelet cannot decode here: quote it ("yes")`},
				{Field: "spec.containers[0].command[1]", Message: `YAML 1.1 reads the bare On as the boolean true, which the kubelet cannot decode here: quote it ("On")`},
			}},
		},
		{
			name: "YAML 1.1 boolean where a boolean belongs",
			data: strings.Replace(manifest, "hostNetwork: true", "hostNetwork: yes", 1),
			want: Result{Accepted: true},
		},
		{
			name: "quoted n",
			data: strings.Replace(manifest, "path: /var/lib/etcd", `path: "n"`, 1),
			want: Result{Accepted: true},
		},
		{
			name: "plain boolean in a string field",
			data: strings.Replace(manifest, "path: /var/lib/etcd", "path: false", 1),
			want: Result{Errors: []Finding{{
				Field:   "spec.volumes[0].hostPath.path",
				Message: `YAML reads the bare false as a boolean, which the kubelet cannot decode into a string: quote it ("false")`,
			}}},
		},
		{
			name: "number in a string field",
			data: strings.Replace(manifest, "    volumeMounts:", "    env: [{name: PORT, value: 2379}]\n    volumeMounts:", 1),
			want: Result{Errors: []Finding{{
				Field:   "spec.containers[0].env[0].value",
				Message: `YAML reads the bare 2379 as a number, which the kubelet cannot decode into a string: quote it ("2379")`,
			}}},
		},
		{
			name: "number where an int-or-string belongs",
			data: strings.Replace(manifest, "    volumeMounts:", "    livenessProbe: {httpGet: {port: 2381, path: /health}}\n    volumeMounts:", 1),
			want: Result{Accepted: true},
		},
		{
			name: "other type error",
			data: strings.Replace(manifest, "hostNetwork: true", "hostNetwork: [true]", 1),
			want: Result{Errors: []Finding{{
				Message: "decode pod: json: cannot unmarshal array into Go struct field PodSpec.spec.hostNetwork of type bool",
			}}},
		},
		{
			name: "second document",
			data: manifest + "---\n" + manifest,
			want: Result{Errors: []Finding{{
				Message: "more than one YAML document: the kubelet silently runs only the first; put each pod in a file of its own",
			}}},
		},
		{
			name: "PodList",
			data: "apiVersion: v1\nkind: PodList\nitems: []\n",
			want: Result{Errors: []Finding{{
				Field:   "kind",
				Message: "PodList is not accepted: the kubelet reads exactly one Pod per file; put each pod in a file of its own",
			}}},
		},
		{
			name: "other kind and version",
			data: "apiVersion: apps/v1\nkind: Deployment\n",
			want: Result{Errors: []Finding{
				{Field: "kind", Message: `unsupported value "Deployment": must be Pod`},
				{Field: "apiVersion", Message: `unsupported value "apps/v1": must be v1`},
			}},
		},
		{
			name: "missing name",
			data: strings.Replace(manifest, "name: etcd\n  namespace", "namespace", 1),
			want: Result{Errors: []Finding{{Field: "metadata.name", Message: "required: the kubelet rejects a static pod without a name"}}},
		},
		{
			name: "unknown field",
			data: strings.Replace(manifest, "    image:", "    imagePullPolicyy: Always\n    image:", 1),
			want: Result{Errors: []Finding{{
				Field:   "spec.containers[0].imagePullPolicyy",
				Message: "unknown field: the kubelet silently drops it (a typo, or wrong indentation?)",
			}}},
		},
		{
			name: "missing namespace",
			data: strings.Replace(manifest, "  namespace: kube-system\n", "", 1),
			want: Result{Accepted: true, Warnings: []Finding{{
				Field: "metadata.namespace", Message: `not set: the kubelet puts the pod in namespace "default"`,
			}}},
		},
		{
			name: "duplicate YAML key",
			data: strings.Replace(manifest, "    image:", "    image: busybox\n    image:", 1),
			want: Result{Errors: []Finding{{
				Message: `duplicate mapping key, of which the kubelet silently keeps the last: yaml: unmarshal errors: line 12: key "image" already set in map`,
			}}},
		},
		{
			name: "duplicate JSON field",
			data: `{"apiVersion":"v1","kind":"Pod","kind":"Pod","metadata":{"name":"etcd","namespace":"kube-system"},
			       "spec":{"containers":[{"name":"etcd","image":"x"}]}}`,
			want: Result{Errors: []Finding{{Field: "kind", Message: "duplicate field: the kubelet silently keeps the last value"}}},
		},
		{
			name: "flow-style YAML is taken as JSON, as the kubelet does",
			data: "{apiVersion: v1, kind: Pod}",
			want: Result{Errors: []Finding{{
				Message: "decode pod: invalid character 'a' looking for beginning of object key string",
			}}},
		},
		{
			name: "YAML syntax error",
			data: "apiVersion: v1\nkind: Pod\n  metadata: x\n",
			want: Result{Errors: []Finding{{Message: "parse YAML: yaml: line 3: mapping values are not allowed in this context"}}},
		},
		{
			name: "empty",
			data: "# nothing but a comment\n",
			want: Result{Errors: []Finding{{Message: "empty manifest: the kubelet cannot decode a pod from it"}}},
		},
		{
			name: "over 10 MiB",
			data: manifest + "# " + strings.Repeat("x", maxManifestSize) + "\n",
			want: Result{Errors: []Finding{{Message: "larger than 10 MiB: the kubelet refuses to read it"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.want.File = "etcd.yaml"
			got := Validate("etcd.yaml", []byte(tt.data), testNode)
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Validate() (-want +got):\n%s", diff)
			}
		})
	}
}

// TestValidateAPIReferenceMessage checks the wording end to end, from a
// manifest to the error a command prints.
func TestValidateAPIReferenceMessage(t *testing.T) {
	data := bytes.Replace(readAPIServerManifest(t),
		[]byte("  - hostPath:\n      path: /usr/share/ca-certificates"),
		[]byte("  - secret:\n      secretName: apiserver-certs\n    name: certs\n  - hostPath:\n      path: /usr/share/ca-certificates"), 1)
	res := Validate("kube-apiserver.yaml", data, testNode)
	want := "kube-apiserver.yaml: spec.volumes[4].secret: static pods may not reference secrets"
	if got := Err([]Result{res}); got == nil || got.Error() != want {
		t.Errorf("Err() = %v, want %q", got, want)
	}
}
