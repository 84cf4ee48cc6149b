package config

import (
	"os"
	"strings"
	"testing"
)

// FuzzLoad feeds arbitrary bytes through decoding, defaulting and
// validation: bad input must be an error, never a panic.
func FuzzLoad(f *testing.F) {
	defaults, err := os.ReadFile("testdata/defaults.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(defaults)
	f.Add([]byte(header + "networking:\n  serviceSubnet: 10.96.0.0/16,fd00::/112\n  podSubnet: 10.244.0.0/16,fd01::/56\n"))
	f.Add([]byte(header + "etcd:\n  external:\n    endpoints: [https://a:2379]\n"))
	f.Add([]byte(header + "apiServer:\n  extraArgs:\n  - {name: v, value: \"2\"}\n  - {name: profiling, remove: true}\n"))
	f.Add([]byte(header + "a: 1\na: 2\n---\nkind: Other\n"))
	f.Add([]byte("- [\n"))
	f.Add([]byte(header + "node: &a {name: *a}\n"))
	f.Fuzz(func(_ *testing.T, data []byte) {
		doc, _, err := parse("fuzz.yaml", data, []string{KindClusterConfiguration})
		if err != nil {
			return
		}
		_, _ = loadCluster("fuzz.yaml", doc, testHost)
	})
}

// FuzzLoadWorker does the same for a WorkerConfiguration, whose errors
// must also never quote the token.
func FuzzLoadWorker(f *testing.F) {
	f.Add([]byte(workerHeader + "discovery: {apiServerEndpoint: 10.0.0.10:6443, token: " + testToken + ", caCertHashes: [" + testHash + "]}\n"))
	f.Add([]byte(workerHeader + "discovery: {file: /d.conf, token: " + testToken + "}\nnode: {address: \"::1\"}\n"))
	f.Add([]byte(workerHeader + "timeouts: {discovery: 0}\nkubelet: {extraConfig: {port: 10250}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, _, err := parse("fuzz.yaml", data, []string{KindWorkerConfiguration})
		w := &WorkerConfiguration{}
		if err != nil || decode("fuzz.yaml", doc, w) != nil {
			return
		}
		_, err = loadWorker("fuzz.yaml", doc, Env{Host: testHost, Worker: &WorkerFlags{}})
		// A token that also stands elsewhere in the file may be quoted there.
		token := w.Discovery.Token
		if err != nil && len(token) > 8 && strings.Count(string(data), token) == 1 && strings.Contains(err.Error(), token) {
			t.Errorf("the error quotes the token: %v", err)
		}
	})
}
