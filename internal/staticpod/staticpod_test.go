package staticpod

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestErr(t *testing.T) {
	accepted := Result{File: "etcd.yaml", Accepted: true, Warnings: []Finding{{Field: "metadata.namespace", Message: "not set"}}}
	if err := Err([]Result{accepted}); err != nil {
		t.Errorf("Err(accepted) = %v, want nil", err)
	}

	rejected := Result{File: "kube-apiserver.yaml", Errors: []Finding{
		{Field: "spec.volumes[3].secret", Resource: "secrets", Message: "static pods may not reference secrets"},
		{Message: "more than one YAML document"},
	}}
	err := Err([]Result{accepted, rejected})
	var re *RejectedError
	if !errors.As(err, &re) {
		t.Fatalf("Err() = %v, want a *RejectedError", err)
	}
	want := "kube-apiserver.yaml: spec.volumes[3].secret: static pods may not reference secrets\n" +
		"kube-apiserver.yaml: more than one YAML document"
	if got := err.Error(); got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if len(re.Results) != 1 || re.Results[0].File != "kube-apiserver.yaml" {
		t.Errorf("Results = %v, want only the rejected result", re.Results)
	}
	if got := re.ExitCode(); got != 3 {
		t.Errorf("ExitCode() = %d, want 3", got)
	}
}

// TestResultJSON pins the shape that `kubeboot validate -o json` prints.
func TestResultJSON(t *testing.T) {
	res := Validate("etcd.yaml", []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: etcd, namespace: kube-system}\n"+
		"spec:\n  serviceAccountName: etcd\n  containers: [{name: etcd, image: x}]\n"), testNode)
	got, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"file":"etcd.yaml","accepted":false,` +
		`"errors":[{"field":"spec.serviceAccountName","resource":"serviceaccounts","message":"static pods may not reference serviceaccounts"}],` +
		`"warnings":[]}`
	if string(got) != want {
		t.Errorf("json.Marshal(Validate()) =\n%s\nwant\n%s", got, want)
	}
}
