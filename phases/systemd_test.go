package phases

import (
	"strings"
	"testing"
)

func TestDropInQuotesForSystemd(t *testing.T) {
	u := KubeletUnit{Comment: "Written by a test.", Args: []string{"--config=/srv/my kubelet/config.yaml", "--hostname-override=a%b$c"}}
	got := string(u.DropIn("/usr/bin/kubelet"))
	want := "[Service]\nExecStart=\nExecStart=/usr/bin/kubelet \"--config=/srv/my kubelet/config.yaml\" --hostname-override=a%%b$$c\n"
	if !strings.HasSuffix(got, want) || !strings.HasPrefix(got, "# Written by a test.\n") {
		t.Errorf("drop-in:\n%s\nwant it to start with the comment and end with:\n%s", got, want)
	}
}
