package config

import (
	"strings"
	"testing"
)

func TestRedactedURL(t *testing.T) {
	for raw, want := range map[string]string{
		"https://s3.example.com:9000":                     "https://s3.example.com:9000",
		"https://AKID:SECRET@s3.example.com:9000":         "https://xxxxx@s3.example.com:9000",
		"https://SECRET@s3.example.com":                   "https://xxxxx@s3.example.com",
		"https://s3.example.com/?X-Amz-Credential=SECRET": "https://s3.example.com/?xxxxx",
		"https://s3.example.com/#SECRET":                  "https://s3.example.com/#xxxxx",
		"https://AKID:SECRET @s3.example.com":             Hidden,
		"https:AKID:SECRET@s3.example.com":                Hidden,
	} {
		if got := RedactedURL(raw); got != want {
			t.Errorf("RedactedURL(%q) = %q, want %q", raw, got, want)
		}
	}
}

func TestTokenWithin(t *testing.T) {
	for s, want := range map[string]bool{
		testToken:                             true,
		"sha256:" + testToken:                 true,
		testToken + ":6443":                   true,
		testHash:                              false,
		"10.0.0.10:6443":                      false,
		"cp.luster.internalnetwork01.example": false,
		"mycluster.internalnetwork01:6443":    false,
	} {
		if got := tokenWithin.MatchString(s); got != want {
			t.Errorf("tokenWithin.MatchString(%q) = %t, want %t", s, got, want)
		}
	}
}

// TestValidateHidesSecrets: a refused value that may hold a secret is
// shown redacted, or not at all.
func TestValidateHidesSecrets(t *testing.T) {
	const secret = "wJalrXUtnFEMI0K7MDENG0bPxRfiCYEXAMPLEKEY"
	s3 := New()
	s3.Etcd.Local = &LocalEtcd{ScheduledSnapshots: &ScheduledSnapshots{S3: &S3Storage{
		Endpoint: "https://AKID:" + secret + "@s3.example.com:9000", Bucket: "backups", CredentialsFile: "/etc/kubeboot/s3-credentials",
	}}}
	SetDefaults(s3, testHost)
	external := New()
	external.Etcd.External = &ExternalEtcd{Endpoints: []string{"htps://root:" + secret + "@10.0.0.2:2379"}, CAFile: "/e/ca.crt", CertFile: "/e/c.crt", KeyFile: "/e/c.key"}
	SetDefaults(external, testHost)
	for name, tt := range map[string]struct {
		c    *ClusterConfiguration
		want string
	}{
		"s3 endpoint":            {s3, `etcd.local.scheduledSnapshots.s3.endpoint: Invalid value: "https://xxxxx@s3.example.com:9000": want the store's https URL`},
		"external etcd endpoint": {external, `etcd.external.endpoints[0]: Invalid value: "htps://xxxxx@10.0.0.2:2379": want a URL`},
	} {
		t.Run(name, func(t *testing.T) {
			wantOneError(t, Validate(tt.c), tt.want)
			if errs := Validate(tt.c); strings.Contains(errs.ToAggregate().Error(), secret) {
				t.Errorf("the error shows the secret: %v", errs)
			}
		})
	}
}

// TestLoadWorkerHidesATokenGivenForAnotherValue: a token given as the CA
// pin or as the endpoint is refused without being shown.
func TestLoadWorkerHidesATokenGivenForAnotherValue(t *testing.T) {
	for _, tt := range []struct{ discovery, want string }{
		{"{apiServerEndpoint: 10.0.0.10:6443, token: " + testToken + ", caCertHashes: [" + testToken + "]}",
			`discovery.caCertHashes[0]: Invalid value: "(hidden)": holds a bootstrap token, which goes in --token: want sha256:<64 hex digits>`},
		{"{apiServerEndpoint: 10.0.0.10:6443, token: " + testToken + ", caCertHashes: ['sha256:" + testToken + "']}",
			`discovery.caCertHashes[0]: Invalid value: "(hidden)"`},
		{"{apiServerEndpoint: " + testToken + ", token: " + testToken + ", caCertHashes: [" + testHash + "]}",
			`discovery.apiServerEndpoint: Invalid value: "(hidden)": holds a bootstrap token, which goes in --token: want host:port (ENDPOINT)`},
	} {
		_, err := loadWorkerJoin(writeConfig(t, workerHeader+"discovery: "+tt.discovery+"\n"), testHost, WorkerFlags{})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want an error containing %q", tt.discovery, err, tt.want)
		}
		if _, secret, _ := strings.Cut(testToken, "."); err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("the error shows the token: %v", err)
		}
	}
}
