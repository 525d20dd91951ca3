package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/schema"
)

// An operator command of a newer build, run beside the daemon of an older
// one, used to migrate the schema under it: the daemon could then not
// start again on its own file ("newer than this build supports"). The
// commands now refuse a database at an older schema, and appview migrate
// upgrades it, with the daemon stopped.
func TestCommandsRefuseAnOlderSchemaAndMigrateUpgradesIt(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	env := []string{"APPVIEW_DATABASE_PATH=" + path}
	older := schema.Latest() - 1
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := schema.MigrateTo(context.Background(), db, older); err != nil {
		t.Fatal(err)
	}
	stored := func() int {
		t.Helper()
		v, err := schema.Version(context.Background(), db)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	for _, args := range [][]string{
		{"cursor", "show"},
		{"cursor", "reset", "jetstream"},
		{"audit"},
		{"rebuild", "--feed", "following"},
		{"backfill", "--actor", "did:plc:viewer"},
	} {
		_, _, err := runCmd(t, env, args...)
		if !errors.Is(err, feeds.ErrSchemaBehind) || !strings.Contains(err.Error(), "appview migrate") {
			t.Errorf("%q on a database at version %d: %v, want ErrSchemaBehind naming appview migrate", args, older, err)
		}
		if v := stored(); v != older {
			t.Fatalf("%q changed the schema to version %d", args, v)
		}
	}

	out, _, err := runCmd(t, env, "migrate")
	if want := fmt.Sprintf("schema migrated from version %d to %d\n", older, schema.Latest()); err != nil || out != want {
		t.Fatalf("migrate: %q, %v; want %q", out, err, want)
	}
	if v := stored(); v != schema.Latest() {
		t.Fatalf("schema at version %d after migrate, want %d", v, schema.Latest())
	}
	out, _, err = runCmd(t, env, "migrate")
	if want := fmt.Sprintf("schema already at version %d\n", schema.Latest()); err != nil || out != want {
		t.Fatalf("migrate again: %q, %v; want %q", out, err, want)
	}
	if _, _, err := runCmd(t, env, "cursor", "show"); err != nil {
		t.Fatalf("cursor show after migrate: %v", err)
	}
}
