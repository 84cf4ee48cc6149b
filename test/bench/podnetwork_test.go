package main

import (
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// TestParseRoundTrip: the mean of iperf's bounceback report is read from
// the whole run's line, not from a one-second interval's; output without
// one is an error.
func TestParseRoundTrip(t *testing.T) {
	out := `------------------------------------------------------------
Client connecting to 10.249.2.5, TCP port 5001 with pid 42 (1 flows)
[ ID] Interval            Transfer    Bandwidth         BB cnt=avg/min/max/stdev         Rtry  Cwnd/RTT    RPS
[  1] 0.0000-1.0000 sec  1.95 KBytes  16.0 Kbits/sec    10=0.116/0.043/0.697/0.204 ms    0  576K/34 us    8643 rps
[  1] 1.0000-2.0000 sec  1.95 KBytes  16.0 Kbits/sec    10=0.034/0.017/0.141/0.038 ms    0  576K/21 us    29326 rps
[  1] 0.0000-2.0146 sec  3.91 KBytes  15.9 Kbits/sec    20=0.075/0.017/0.697/0.149 ms    0  576K/1822 us    13351 rps
[  1] 0.0000-2.0146 sec BB8(f)-PDF: bin(w=100us):cnt(20)=1:18,2:1,7:1 (5.00/95.00/99.7%=1/7/7,Outliers=1,obl/obu=0/0)
`
	got, err := parseRoundTrip(out)
	if err != nil || got != 75*time.Microsecond {
		t.Errorf("got %v, %v; want 75µs", got, err)
	}
	if _, err := parseRoundTrip("connect failed: Connection refused\n"); err == nil {
		t.Error("output without a report: no error")
	}
}

// TestPodNetworkDescription: kubeboot's candidate is the lab as it is;
// kube-router's sets the pod network none, applies its manifest from
// addons.manifests, mounted into cp1, and names its image.
func TestPodNetworkDescription(t *testing.T) {
	var flannel, own struct {
		Images                    []string
		ClusterConfigurationPatch map[string]any `json:"clusterConfigurationPatch"`
		Nodes                     []struct {
			Name        string
			ExtraMounts []struct{ HostPath, ContainerPath string } `json:"extraMounts"`
		}
	}
	if err := yaml.Unmarshal([]byte(podNetworkDescription(podNetworkCandidates[0], "/tmp/d", "/tmp/m.yaml")), &flannel); err != nil {
		t.Fatal(err)
	}
	if flannel.Images != nil || flannel.ClusterConfigurationPatch != nil || len(flannel.Nodes) != 3 || flannel.Nodes[0].ExtraMounts != nil {
		t.Errorf("flannel's lab: %+v", flannel)
	}
	if err := yaml.Unmarshal([]byte(podNetworkDescription(podNetworkCandidates[1], "/tmp/d", "/tmp/m.yaml")), &own); err != nil {
		t.Fatal(err)
	}
	addons := own.ClusterConfigurationPatch["addons"].(map[string]any)
	if len(own.Images) != 1 || own.Images[0] != kubeRouterImage || addons["cni"].(map[string]any)["provider"] != "none" ||
		addons["manifests"].([]any)[0] != kubeRouterPath || len(own.Nodes) != 3 ||
		len(own.Nodes[0].ExtraMounts) != 1 || own.Nodes[0].ExtraMounts[0].HostPath != "/tmp/m.yaml" || own.Nodes[0].ExtraMounts[0].ContainerPath != kubeRouterPath {
		t.Errorf("kube-router's lab: %+v", own)
	}
	if !strings.Contains(kubeRouterManifest, "image: "+kubeRouterImage) {
		t.Errorf("the manifest does not run %s", kubeRouterImage)
	}
}

// TestPodNetworkMarkdown: the table shows each candidate's medians and
// ranges, its ratio to the nodes' own path, and how many rounds enforced
// the policy.
func TestPodNetworkMarkdown(t *testing.T) {
	run := func(pod, host float64, rtt time.Duration, enforced bool) podNetworkRun {
		return podNetworkRun{podBits: pod, hostBits: host, podRTT: rtt, hostRTT: 50 * time.Microsecond,
			ready: []time.Duration{2 * time.Second, 3 * time.Second}, certReady: []time.Duration{time.Second, time.Second}, cpu: 0.004, memory: 40 << 20, enforced: enforced}
	}
	r := podNetworkResults{
		podNetworkCandidates[0].name: {run(2e9, 4e9, 100*time.Microsecond, true), run(3e9, 4e9, 100*time.Microsecond, true)},
		podNetworkCandidates[1].name: {run(4e9, 4e9, 60*time.Microsecond, true), run(4e9, 4e9, 60*time.Microsecond, false)},
	}
	var b strings.Builder
	r.markdown(&b, "")
	md := b.String()
	for _, want := range []string{
		podNetworkHeading + "\n",
		"| throughput, pod on w1 to pod on w2 | 2.50 Gbit/s (2.00–3.00), 0.62× of the nodes' own | 4.00 Gbit/s (4.00–4.00), 1.00× of the nodes' own | 4.00 Gbit/s (4.00–4.00) |",
		"| round trip, pod to pod | 100 µs (100–100), 2.00× of the nodes' own | 60 µs (60–60), 1.20× of the nodes' own | 50 µs (50–50) |",
		"| CPU per node, idle | 4.0 millicores (4.0–4.0) |",
		"| memory per node (working set) | 40.0 MiB (40.0–40.0) |",
		"| kubelet start to Node Ready, worker | 2.50 s (2.00–3.00) |",
		"| of which the client certificate to Node Ready | 1.00 s (1.00–1.00) |",
		"| 2 of 2 rounds | 1 of 2 rounds | - |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the section lacks %q:\n%s", want, md)
		}
	}
}
