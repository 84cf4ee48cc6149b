package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSpliceSection: -only etcd-snapshot replaces its section and nothing
// else, and puts it where a full run would when the report lacks it.
func TestSpliceSection(t *testing.T) {
	section := etcdSnapshotHeading + "\n\nnew\n\n"
	lab := etcdSnapshotBefore + "\n\nlab\n"
	for _, tc := range []struct{ name, doc, want string }{
		{"replaced", "# R\n\n" + etcdSnapshotHeading + "\n\nold\n\n" + lab, "# R\n\n" + section + lab},
		{"replaced at the end", "# R\n\n" + etcdSnapshotHeading + "\n\nold\n", "# R\n\n" + section},
		{"inserted before the lab", "# R\n\n" + lab, "# R\n\n" + section + lab},
		{"appended", "# R\n\n", "# R\n\n" + section},
		{"a new report", "", section},
	} {
		if got := spliceSection(tc.doc, etcdSnapshotHeading, etcdSnapshotBefore, section); got != tc.want {
			t.Errorf("%s: got\n%q\nwant\n%q", tc.name, got, tc.want)
		}
	}
	// A "### " section ends at the next "### " or "## " heading; a "####"
	// inside it is its own.
	usable := usableHeading + "\n\nnew\n\n"
	for _, tc := range []struct{ name, doc, want string }{
		{"before a sibling", "## C\n\n" + usableHeading + "\n\nold\n#### sub\n\n### Scale\n", "## C\n\n" + usable + "### Scale\n"},
		{"before a parent", "## C\n\n" + usableHeading + "\n\nold\n\n## Next\n", "## C\n\n" + usable + "## Next\n"},
	} {
		if got := spliceSection(tc.doc, usableHeading, usableBefore, usable); got != tc.want {
			t.Errorf("%s: got\n%q\nwant\n%q", tc.name, got, tc.want)
		}
	}
}

// TestConfigMapValue: every value is the size the fill counts on.
func TestConfigMapValue(t *testing.T) {
	for _, name := range []string{"cm-0", "cm-123456"} {
		if n := len(configMapValue(name)); n != fillValueSize {
			t.Errorf("configMapValue(%q) is %d bytes, want %d", name, n, fillValueSize)
		}
	}
}

// TestParseSizes: -etcd-mib takes positive, increasing sizes.
func TestParseSizes(t *testing.T) {
	if got, err := parseSizes("100, 1024"); err != nil || !slices.Equal(got, []int{100, 1024}) {
		t.Errorf("100, 1024: %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "100,x", "1024,100", "100,100"} {
		if _, err := parseSizes(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestEtcdSnapshotMarkdown: the section has one table per database size,
// each with its own ratios, and the commands once.
func TestEtcdSnapshotMarkdown(t *testing.T) {
	var all []*etcdSnapshotResults
	for i, mib := range []int64{100, 1024} {
		e := &etcdBench{o: options{kubeboot: "kubeboot", binDir: "bin"}, endpoint: "https://127.0.0.50:2379", peer: "https://127.0.0.50:2380",
			res: &etcdSnapshotResults{commit: "abc", etcdVersion: "3.6.8", address: "127.0.0.50", runs: 1, keys: 1000 * (i + 1), dbSize: mib << 20, fileSize: mib << 20}}
		e.buildJobs()
		scale := time.Duration(i*9 + 1)
		for j, d := range map[*job]time.Duration{e.res.kubebootSave: 900, e.res.etcdctlSave: 600, e.res.kubebootRestore: 330, e.res.etcdutlRestore: 360, e.res.verify: 180, e.res.etcdutlStart: 14} {
			j.samples = []sample{{wall: d * time.Millisecond * scale, cpu: d * time.Millisecond * scale, rss: 100 << 20}}
		}
		all = append(all, e.res)
	}
	var b strings.Builder
	etcdSnapshotMarkdown(&b, all)
	out := b.String()
	for _, want := range []string{
		"### A database of 100.0 MiB: 1000 keys, a snapshot file of 100.0 MiB\n",
		"### A database of 1024.0 MiB: 2000 keys, a snapshot file of 1024.0 MiB\n",
		"| kubeboot etcd snapshot save | 900 ms / 900 ms / 900 ms | 1.50× (1.50–1.50) |",
		"| kubeboot etcd snapshot save | 9 s / 9 s / 9 s | 1.50× (1.50–1.50) |",
		"| etcdutl snapshot restore | 3.6 s / 3.6 s / 3.6 s | 1.00× (1.00–1.00) |",
		"the verification is 60% of the difference between the medians",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "- etcdutl snapshot restore: `"); n != 1 {
		t.Errorf("the commands are listed %d times, want once:\n%s", n, out)
	}
}
