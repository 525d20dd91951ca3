package main

import (
	"strings"
	"testing"
)

func TestCursorCommands(t *testing.T) {
	env := []string{"APPVIEW_DATABASE_PATH=" + t.TempDir() + "/appview.db"}
	out, _, err := runCmd(t, env, "cursor", "reset", "jetstream")
	if err != nil || strings.TrimSpace(out) != "nothing to reset" {
		t.Fatalf("reset on an empty database: %q %v", out, err)
	}
	out, _, err = runCmd(t, env, "cursor", "reset", "viewer", "did:plc:nobody", "--feed", "following")
	if err != nil || strings.TrimSpace(out) != "nothing to reset" {
		t.Fatalf("reset of an unknown viewer: %q %v", out, err)
	}
	if _, _, err := runCmd(t, env, "cursor", "reset", "account", "not-a-did"); err == nil {
		t.Fatal("a bad DID was accepted")
	}
	// A misspelt feed is an error, not "nothing to reset".
	if out, _, err := runCmd(t, env, "cursor", "reset", "viewer", "did:plc:nobody", "--feed", "folowing"); err == nil {
		t.Fatalf("reset of a feed that does not exist: %q, no error", out)
	}
	for _, bad := range []string{"0", "-1"} {
		if _, _, err := runCmd(t, env, "audit", "--limit", bad); err == nil {
			t.Errorf("audit --limit %s was accepted", bad)
		}
	}
	out, _, err = runCmd(t, env, "cursor", "show")
	if err != nil || !strings.Contains(out, "none stored") || !strings.Contains(out, "following: 0 viewers, 0 items") {
		t.Fatalf("cursor show:\n%s\n%v", out, err)
	}
	out, _, err = runCmd(t, env, "audit")
	if err != nil || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Fatalf("audit after resets of nothing should list nothing:\n%s %v", out, err)
	}
}
