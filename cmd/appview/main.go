// Command appview runs the following-timeline appview daemon.
//
//	appview serve [--config FILE]
//	appview config [--config FILE] [--env]
//	appview health [--url URL] [--ready] [--timeout D] [--config FILE]
//	appview version
//	appview cursor show | reset jetstream|account|viewer …
//	appview audit [--limit N]
//	appview backfill --actor DID|HANDLE [--feed NAME] [--progress-every D]
//	appview rebuild --feed NAME [--chunk N] [--progress-every D]
//	appview migrate
//
// The commands that open the database take --config FILE as serve does.
//
// Each command lives in its own file; this one only dispatches.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"syscall"
)

func main() {
	ctx, stop := onSignals(context.Background(), os.Stderr, os.Exit, os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "appview:", err)
		os.Exit(1)
	}
}

// run dispatches one command. environ is the process environment, in the
// form of os.Environ, so tests can pass their own.
func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	err := dispatch(ctx, args, environ, stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		// -h: the command's flag set printed its usage; asking is no failure.
		return nil
	}
	return err
}

func dispatch(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		usage(stderr)
		return errors.New("missing command")
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], environ, stderr)
	case "config":
		return printConfig(args[1:], environ, stdout, stderr)
	case "health":
		return health(ctx, args[1:], environ, stdout, stderr)
	case "version":
		return version(args[1:], stdout)
	case "cursor":
		return cursorCmd(ctx, args[1:], environ, stdout, stderr)
	case "audit":
		return auditCmd(ctx, args[1:], environ, stdout, stderr)
	case "backfill":
		return backfillCmd(ctx, args[1:], environ, stdout, stderr)
	case "rebuild":
		return rebuildCmd(ctx, args[1:], environ, stdout, stderr)
	case "migrate":
		return migrateCmd(ctx, args[1:], environ, stdout, stderr)
	case "help", "-h", "--help":
		usage(stdout)
		return nil
	}
	usage(stderr)
	return fmt.Errorf("unknown command %q", args[0])
}

// cursorUsage is the cursor commands' part of the usage, which
// `appview cursor -h` prints alone.
const cursorUsage = `  appview cursor show [--config FILE]
                                    the Jetstream cursor, feeds, backfill states, the sweep
  appview cursor reset jetstream [--to RFC3339]
  appview cursor reset account DID [--collection NSID]
  appview cursor reset viewer DID [--feed NAME]
                                    repair a position; safe while the daemon runs; audited
`

// isHelp reports whether an argument asks for help.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  appview serve [--config FILE]     run the daemon (built-in defaults without a file)
  appview config [--config FILE]    print the effective config as YAML, secrets redacted
  appview config --env              list the APPVIEW_ environment variables
  appview health [--url URL] [--ready] [--timeout D] [--config FILE]
                                    probe a running daemon's /xrpc/_health (/readyz with
                                    --ready); exit 0 on a 200
  appview version                   print the version, commit and Go version
`+cursorUsage+`  appview audit [--limit N]         list the resets made, newest first
  appview backfill --actor DID|HANDLE [--feed NAME]
                                    run a viewer's first read now (every feed, or one),
                                    as the daemon would, without the per-client limit
  appview rebuild --feed NAME [--chunk N]
                                    rebuild every viewer's items in a feed from the
                                    stored records and follows
  appview migrate [--config FILE]   bring the database to this build's schema; run it
                                    with the daemon stopped (serve migrates too)

The commands that open the database (cursor, audit, backfill, rebuild,
migrate) take --config FILE too: give them the daemon's config, the
same file or APPVIEW_ variables, since feeds that differ are refused.

backfill and rebuild show progress on stderr (a bar on a terminal, a log
line every --progress-every otherwise), are safe while the daemon runs, and
resume where they stopped when run again after Ctrl-C or SIGTERM. The
commands that open the database refuse one at an older schema than their
build's, which may be a running older daemon's: migrate it first.

Scalar config keys can also be set from the environment: APPVIEW_ plus the
key path in upper snake case (APPVIEW_DATABASE_PATH, APPVIEW_HTTP_LISTEN,
APPVIEW_JETSTREAM_URLS as a comma list). They override the file; feeds are
configured in the file only.
`)
}
