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
	out, _, err = runCmd(t, env, "cursor", "show")
	if err != nil || !strings.Contains(out, "none stored") || !strings.Contains(out, "following: 0 viewers, 0 items") {
		t.Fatalf("cursor show:\n%s\n%v", out, err)
	}
	out, _, err = runCmd(t, env, "audit")
	if err != nil || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Fatalf("audit after resets of nothing should list nothing:\n%s %v", out, err)
	}
}
