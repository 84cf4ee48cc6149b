package machine

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSystemAccounts: a machine gets the host's system users and groups
// (root, the packages' IDs below 1000, nobody), never people's accounts,
// and a file without root first is refused.
func TestSystemAccounts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "passwd")
	host := "root:x:0:0:root:/root:/bin/bash\n" +
		"messagebus:x:100:101::/nonexistent:/usr/sbin/nologin\n" +
		"alice:x:1000:1000:Alice:/home/alice:/bin/bash\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n" +
		"broken line\n"
	if err := os.WriteFile(path, []byte(host), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := systemAccounts(path)
	want := "root:x:0:0:root:/root:/bin/bash\n" +
		"messagebus:x:100:101::/nonexistent:/usr/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
	if err != nil || got != want {
		t.Errorf("systemAccounts = %q, %v; want %q", got, err, want)
	}
	if err := os.WriteFile(path, []byte("alice:x:1000:1000::/home/alice:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := systemAccounts(path); err == nil {
		t.Error("a file without root's entry was taken")
	}
}
