package feeds

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/atfeeds/appview/schema"
)

// ErrSchemaBehind is returned by Open with Options.Existing when the
// database's schema is older than this build's: the daemon running on it
// is of an older build, or none has run this build yet.
var ErrSchemaBehind = errors.New("the database's schema is older than this build's")

// refuseOlderSchema returns ErrSchemaBehind, with both versions, for a
// database whose schema this build would migrate. A new file (version 0)
// is not refused: nothing runs on it yet.
func refuseOlderSchema(ctx context.Context, db *sql.DB) error {
	v, err := schema.Version(ctx, db)
	if err != nil {
		return err
	}
	if v > 0 && v < schema.Latest() {
		return fmt.Errorf("%w: version %d, this build's %d; stop the daemon and run this build's `appview migrate` (or start its `appview serve`)",
			ErrSchemaBehind, v, schema.Latest())
	}
	return nil
}

// Migrate brings the database at path to this build's schema, as the
// daemon does when it starts, and returns the versions before and after.
// It changes nothing else (the feeds stay as the database holds them).
// Run it with the daemon stopped: an older daemon on the file would find
// the schema changed under it.
func Migrate(ctx context.Context, path string) (from, to int, err error) {
	db, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		return 0, 0, fmt.Errorf("open database: %w", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if from, err = schema.Version(ctx, db); err != nil {
		return 0, 0, err
	}
	if err := schema.Migrate(ctx, db); err != nil {
		return from, 0, fmt.Errorf("migrate database: %w", err)
	}
	to, err = schema.Version(ctx, db)
	return from, to, err
}
