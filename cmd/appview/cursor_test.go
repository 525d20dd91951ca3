package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/atfeeds/appview/appview"
)

// createDatabase makes the database env configures, as the daemon's first
// start would.
func createDatabase(t *testing.T, env []string) {
	t.Helper()
	cfg, err := appview.LoadConfigEnv("", env)
	if err != nil {
		t.Fatal(err)
	}
	st, _, err := appview.OpenOrCreateStore(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
}

// A command given the daemon's config from another working directory
// (the default database.path is relative) used to create an empty
// database there, report nothing stored and exit 0 (found by a review).
func TestCommandsRefuseAMissingDatabase(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	env := []string{"APPVIEW_DATABASE_PATH=" + path}
	for _, args := range [][]string{
		{"cursor", "show"},
		{"cursor", "reset", "jetstream"},
		{"audit"},
		{"rebuild", "--feed", "following"},
		{"migrate"},
	} {
		_, _, err := runCmd(t, env, args...)
		if err == nil || !strings.Contains(err.Error(), "no database at "+path) {
			t.Errorf("%q: %v, want no database at %s", args, err, path)
		}
		if _, err := os.Stat(path); err == nil {
			t.Fatalf("%q created %s", args, path)
		}
	}
}

func TestCursorCommands(t *testing.T) {
	env := []string{"APPVIEW_DATABASE_PATH=" + t.TempDir() + "/appview.db"}
	createDatabase(t, env)
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
	// So is a misspelt collection, even for an account not stored.
	if out, _, err := runCmd(t, env, "cursor", "reset", "account", "did:plc:nobody", "--collection", "app.bsky.feed.pots"); err == nil ||
		!strings.Contains(err.Error(), `"app.bsky.feed.pots"`) {
		t.Fatalf("reset of a collection no feed uses: %q, %v", out, err)
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

// -h on any command prints its help and succeeds, and a bad DID is
// refused before the database is opened: `cursor reset account -h` made
// and migrated ./appview.db where it ran (found by a docs review).
func TestHelpSucceedsAndOpensNothing(t *testing.T) {
	db := t.TempDir() + "/appview.db"
	env := []string{"APPVIEW_DATABASE_PATH=" + db}
	for _, args := range [][]string{
		{"serve", "-h"}, {"config", "-h"}, {"health", "-h"}, {"version", "-h"}, {"audit", "-h"},
		{"backfill", "-h"}, {"rebuild", "-h"}, {"cursor", "-h"}, {"cursor", "show", "-h"},
		{"cursor", "reset", "-h"}, {"cursor", "reset", "jetstream", "-h"},
		{"cursor", "reset", "account", "-h"}, {"cursor", "reset", "viewer", "--help"},
	} {
		out, errOut, err := runCmd(t, env, args...)
		if err != nil {
			t.Errorf("%s: %v", strings.Join(args, " "), err)
		}
		if !strings.Contains(out+errOut, "usage") && !strings.Contains(out+errOut, "Usage") {
			t.Errorf("%s printed no usage:\n%s%s", strings.Join(args, " "), out, errOut)
		}
	}
	if _, _, err := runCmd(t, env, "cursor", "reset", "account", "not-a-did"); err == nil {
		t.Error("a bad DID was accepted")
	}
	if _, err := os.Stat(db); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("help and a bad DID left a database behind: %v", err)
	}
}

// `appview backfill` makes the database when there is none; one it cannot
// make (its directory missing, or not writable) said only SQLite's
// "read journal mode: unable to open database file (14)", naming neither
// the file nor the reason.
func TestBackfillSaysWhyItCannotCreateTheDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "appview.db")
	env := []string{"APPVIEW_DATABASE_PATH=" + path}
	_, _, err := runCmd(t, env, "backfill", "--actor", "did:plc:nobody")
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "no such file or directory") {
		t.Fatalf("backfill into a missing directory: %v, want an error naming %s and the reason", err, path)
	}
}

// --progress-every 0 (or negative) was taken for the default, 5s.
func TestProgressEveryMustBePositive(t *testing.T) {
	env := []string{"APPVIEW_DATABASE_PATH=" + filepath.Join(t.TempDir(), "appview.db"),
		"APPVIEW_IDENTITY_PLC_URL=http://127.0.0.1:1"} // never the real directory
	for _, args := range [][]string{
		{"backfill", "--actor", "did:plc:nobody", "--progress-every", "0s"},
		{"rebuild", "--feed", "following", "--progress-every", "-5s"},
	} {
		_, _, err := runCmd(t, env, args...)
		if err == nil || !strings.Contains(err.Error(), "--progress-every") {
			t.Errorf("%q: %v, want an error naming --progress-every", args, err)
		}
	}
}
