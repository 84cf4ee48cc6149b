package staticpod

import (
	"strings"
	"testing"
)

// TestValidateKubeletRules feeds Validate, the entry point of `kubeboot
// validate`, manifests that the kubelet v1.36 rejects at pod-create
// validation but that kubeboot used to accept: the examples first,
// then one case per rule group added with them. Each must be rejected at
// the named field. test/tools/podvalidation checks the same agreement on a
// generated corpus against the kubelet's own code.
func TestValidateKubeletRules(t *testing.T) {
	const base = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: kube-system\n"
	container := func(extra string) string {
		return base + "spec:\n  containers:\n  - name: c\n    image: registry.k8s.io/pause:3.10\n" + extra
	}
	tests := []struct {
		name, manifest, field string
	}{
		{"activeDeadlineSeconds 0", container("  activeDeadlineSeconds: 0\n"), "spec.activeDeadlineSeconds"},
		{"33 DNS searches", container("  dnsConfig:\n    searches: [" + strings.TrimSuffix(strings.Repeat("a.example,", 33), ",") + "]\n"), "spec.dnsConfig.searches"},
		{"empty DNS option name", container("  dnsConfig:\n    options:\n    - value: \"1\"\n"), "spec.dnsConfig.options[0].name"},
		{"image with a leading space", base + "spec:\n  containers:\n  - name: c\n    image: \" registry.k8s.io/pause:3.10\"\n", "spec.containers[0].image"},
		{"negative runAsUser", container("  securityContext:\n    runAsUser: -5\n"), "spec.securityContext.runAsUser"},
		{"negative container runAsGroup", container("    securityContext:\n      runAsGroup: -1\n"), "spec.containers[0].securityContext.runAsGroup"},
		{"nameserver not an IP", container("  dnsConfig:\n    nameservers: [\"dns.example\"]\n"), "spec.dnsConfig.nameservers[0]"},
		{"host alias not an IP", container("  hostAliases:\n  - ip: \" 10.0.0.1\"\n    hostnames: [a]\n"), "spec.hostAliases[0].ip"},
		{"toleration with empty key and Equal", container("  tolerations:\n  - operator: Equal\n"), "spec.tolerations[0].operator"},
		{"seccomp Localhost without profile", container("  securityContext:\n    seccompProfile:\n      type: Localhost\n"), "spec.securityContext.seccompProfile.localhostProfile"},
		{"bad sysctl name", container("  securityContext:\n    sysctls:\n    - name: \" net.core.somaxconn\"\n      value: \"1\"\n"), "spec.securityContext.sysctls[0].name"},
		{"bad probe scheme", container("    livenessProbe:\n      httpGet:\n        port: 80\n        scheme: http\n"), "spec.containers[0].livenessProbe.httpGet.scheme"},
		{"readiness probe with a grace period", container("    readinessProbe:\n      exec:\n        command: [\"true\"]\n      terminationGracePeriodSeconds: 1\n"), "spec.containers[0].readinessProbe.terminationGracePeriodSeconds"},
		{"resource name without domain", container("    resources:\n      limits:\n        gpu: \"1\"\n"), "spec.containers[0].resources.limits[gpu]"},
		{"file mode above 0777", container("  volumes:\n  - name: v\n    downwardAPI:\n      defaultMode: 1000\n"), "spec.volumes[0].downwardAPI.defaultMode"},
		{"stop signal without spec.os", container("    lifecycle:\n      stopSignal: SIGTERM\n"), "spec.containers[0].lifecycle.stopSignal"},
		{"scheduler-only field", container("  schedulingGates:\n  - name: \"\"\n"), "spec.schedulingGates"},
		{"container windowsOptions", container("    securityContext:\n      windowsOptions:\n        gmsaCredentialSpecName: x_Y\n"), "spec.containers[0].securityContext.windowsOptions"},
		{"unchecked volume type", container("  volumes:\n  - name: v\n    nfs:\n      server: \"\"\n      path: x\n"), "spec.volumes[0].nfs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Validate("p.yaml", []byte(tt.manifest), testNode)
			if res.Accepted {
				t.Fatalf("accepted; want a finding at %s", tt.field)
			}
			for _, f := range res.Errors {
				if f.Field == tt.field {
					return
				}
			}
			t.Errorf("no finding at %s; got %v", tt.field, res.Errors)
		})
	}
}
