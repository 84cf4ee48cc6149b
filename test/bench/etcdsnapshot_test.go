package main

import "testing"

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
