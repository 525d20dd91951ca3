package main

import (
	"context"
	"fmt"
	"io"

	"github.com/atfeeds/appview/appview"
)

// migrateCmd brings the configured database to this build's schema: the
// step of an upgrade between stopping the old daemon and starting the new
// one (whose serve would migrate too). The other operator commands refuse
// a database at an older schema, since they may run beside a daemon of
// the older build.
func migrateCmd(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	cfg, err := parseForCommand("migrate", args, environ, stderr, nil)
	if err != nil {
		return err
	}
	from, to, err := appview.MigrateStore(ctx, cfg)
	if err != nil {
		return err
	}
	if from == to {
		_, err = fmt.Fprintf(stdout, "schema already at version %d\n", to)
		return err
	}
	_, err = fmt.Fprintf(stdout, "schema migrated from version %d to %d\n", from, to)
	return err
}
