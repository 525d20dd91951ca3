package appview

import (
	"maps"
	"testing"
)

func TestBuildCommit(t *testing.T) {
	old := Commit
	t.Cleanup(func() { Commit = old })
	Commit = "0123abc"
	if got := BuildCommit(); got != "0123abc" {
		t.Errorf("BuildCommit with Commit set = %q", got)
	}
	Commit = ""
	// A test binary carries no VCS stamp.
	if got := BuildCommit(); got == "" {
		t.Error("BuildCommit without Commit is empty, want a revision or unknown")
	}
}

// build_info carries version, commit and Go version.
func TestBuildInfoMetric(t *testing.T) {
	old := Commit
	t.Cleanup(func() { Commit = old })
	Commit = "0123abc"
	families, err := newRegistry("v9.9.9").Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != "appview_build_info" {
			continue
		}
		labels := map[string]string{}
		for _, l := range mf.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		want := map[string]string{"version": "v9.9.9", "commit": "0123abc", "goversion": GoVersion()}
		if !maps.Equal(labels, want) || mf.GetMetric()[0].GetGauge().GetValue() != 1 {
			t.Errorf("build_info labels %v value %v, want %v and 1", labels, mf.GetMetric()[0].GetGauge().GetValue(), want)
		}
		return
	}
	t.Fatal("no appview_build_info")
}
