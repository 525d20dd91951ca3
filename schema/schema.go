// Package schema holds the SQLite schema as embedded, numbered migrations
// and applies them in order, tracking progress in PRAGMA user_version.
package schema

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

//go:embed *.sql
var files embed.FS

// Migration is one numbered schema step.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations returns every embedded migration in version order. File names
// are NNNN_name.sql; versions must run 1, 2, 3 … without gaps.
func Migrations() ([]Migration, error) {
	names, err := fs.Glob(files, "*.sql")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, name := range names {
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %q: name must start with a positive number and an underscore", name)
		}
		body, err := files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration %q: expected version %d", m.Name, i+1)
		}
	}
	return out, nil
}

// Latest is the schema version this build writes.
func Latest() int {
	ms, err := Migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

// Migrate brings the database up to the latest version, one transaction per
// step. A database written by a newer build is refused rather than
// half-understood.
func Migrate(ctx context.Context, db *sql.DB) error {
	return MigrateTo(ctx, db, Latest())
}

// MigrateTo brings the database up to version (at most Latest), one
// transaction per step; a database at or past it is left as it is, unless
// it is newer than this build.
func MigrateTo(ctx context.Context, db *sql.DB, version int) error {
	ms, err := Migrations()
	if err != nil {
		return err
	}
	current, err := Version(ctx, db)
	if err != nil {
		return err
	}
	if current > len(ms) {
		return fmt.Errorf("database schema version %d is newer than this build supports (%d): upgrade the daemon", current, len(ms))
	}
	for _, m := range ms[current:min(max(version, current), len(ms))] {
		if err := apply(ctx, db, m); err != nil {
			return fmt.Errorf("apply migration %s: %w", m.Name, err)
		}
	}
	return nil
}

// Version is the database's schema version: the last migration applied,
// 0 for a new file.
func Version(ctx context.Context, db *sql.DB) (int, error) {
	var v int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

func apply(ctx context.Context, db *sql.DB, m Migration) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	// Version was read before this transaction took the write lock, and
	// another process (a daemon starting beside an operator command that
	// made the file) may have applied the step since: read it again here
	// and leave a step already applied as it is.
	var v int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if v > Latest() {
		return fmt.Errorf("database schema version %d is newer than this build supports (%d): upgrade the daemon", v, Latest())
	}
	if v >= m.Version {
		return nil
	}
	if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
		return err
	}
	// PRAGMA takes no bound parameters; the version is our own integer.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", m.Version)); err != nil {
		return err
	}
	return tx.Commit()
}
