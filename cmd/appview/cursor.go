package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/user"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/appview"
	"github.com/atfeeds/appview/feeds"
)

// cursorCmd serves `appview cursor show` and `appview cursor reset …`:
// the operator's view of every stored position, and the repairs. Safe
// while the daemon runs (see feeds/admin.go).
func cursorCmd(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("cursor: want show or reset")
	}
	if isHelp(args[0]) {
		return cursorHelp(stdout)
	}
	switch args[0] {
	case "show":
		store, _, err := openForCommand(ctx, "cursor show", args[1:], environ, stderr, nil)
		if err != nil {
			return err
		}
		defer store.Close()
		r, err := store.Report(ctx)
		if err != nil {
			return err
		}
		printReport(stdout, r, time.Now())
		return nil
	case "reset":
		return cursorReset(ctx, args[1:], environ, stdout, stderr)
	}
	return fmt.Errorf("cursor: unknown subcommand %q", args[0])
}

func cursorReset(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("cursor reset: want jetstream, account DID or viewer DID")
	}
	what, rest := args[0], args[1:]
	takesDID := what == "account" || what == "viewer"
	if isHelp(what) || takesDID && len(rest) > 0 && isHelp(rest[0]) {
		return cursorHelp(stdout)
	}
	if !takesDID && what != "jetstream" {
		return fmt.Errorf("cursor reset: unknown target %q", what)
	}
	var subject syntax.DID
	if takesDID {
		if len(rest) == 0 {
			return fmt.Errorf("cursor reset %s: want a DID", what)
		}
		// Checked before the database is opened (and made, if absent).
		did, err := syntax.ParseDID(rest[0])
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		subject, rest = did, rest[1:]
	}
	var to, collection, feed *string
	extra := func(fs *flag.FlagSet) {
		switch what {
		case "jetstream":
			to = fs.String("to", "", "RFC 3339 time to resume from (default: forget the cursor, start at the live tip)")
		case "account":
			collection = fs.String("collection", "", "only this collection's listing")
		case "viewer":
			feed = fs.String("feed", "", "only this feed")
		}
	}
	store, _, err := openForCommand(ctx, "cursor reset "+what, rest, environ, stderr, extra)
	if err != nil {
		return err
	}
	defer store.Close()
	who := operator()
	now := time.Now()
	var e feeds.AuditEntry
	switch what {
	case "jetstream":
		var at time.Time
		if *to != "" {
			if at, err = time.Parse(time.RFC3339, *to); err != nil {
				return fmt.Errorf("--to: %w", err)
			}
		}
		e, err = store.ResetJetstream(ctx, at, who, now)
	case "account":
		e, err = store.ResetAccount(ctx, subject, syntax.NSID(*collection), who, now)
	case "viewer":
		e, err = store.ResetViewer(ctx, subject, *feed, who, now)
	}
	if errors.Is(err, feeds.ErrNothingToReset) {
		fmt.Fprintln(stdout, "nothing to reset")
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s %s: %s -> %s\n", e.Action, e.Target, e.Old, e.New)
	return nil
}

// cursorHelp prints the cursor commands' usage.
func cursorHelp(stdout io.Writer) error {
	_, err := fmt.Fprint(stdout, "usage:\n"+cursorUsage)
	return err
}

// auditCmd lists the audit log.
func auditCmd(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	var limit *int
	store, _, err := openForCommand(ctx, "audit", args, environ, stderr, func(fs *flag.FlagSet) {
		limit = fs.Int("limit", 50, "entries to show, newest first")
	})
	if err != nil {
		return err
	}
	defer store.Close()
	if *limit < 1 {
		return fmt.Errorf("--limit %d: must be at least 1", *limit)
	}
	entries, err := store.Audit(ctx, *limit)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tUSER\tACTION\tTARGET\tOLD\tNEW")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.At.UTC().Format(time.RFC3339), e.User, e.Action, e.Target, e.Old, e.New)
	}
	return tw.Flush()
}

// openForCommand parses --config (and the command's own flags) and opens
// the configured database.
func openForCommand(ctx context.Context, name string, args, environ []string, stderr io.Writer, extra func(*flag.FlagSet)) (*feeds.Store, appview.Config, error) {
	cfg, err := parseForCommand(name, args, environ, stderr, extra)
	if err != nil {
		return nil, cfg, err
	}
	store, err := appview.OpenStore(ctx, cfg)
	return store, cfg, err
}

// parseForCommand parses --config and the command's own flags, and loads
// the config (file and APPVIEW_ variables), opening nothing.
func parseForCommand(name string, args, environ []string, stderr io.Writer, extra func(*flag.FlagSet)) (appview.Config, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML config file (default: built-in defaults)")
	if extra != nil {
		extra(fs)
	}
	if err := fs.Parse(args); err != nil {
		return appview.Config{}, err
	}
	if fs.NArg() > 0 {
		return appview.Config{}, fmt.Errorf("%s: unexpected argument %q", name, fs.Arg(0))
	}
	return appview.LoadConfigEnv(*configPath, environ)
}

func operator() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return "unknown"
}

func printReport(w io.Writer, r feeds.CursorReport, now time.Time) {
	js := r.Jetstream
	fmt.Fprintln(w, "jetstream cursor")
	if js.TimeUS == 0 {
		fmt.Fprintf(w, "  none stored (starts at the live tip), generation %d\n", r.Generation)
	} else {
		at := time.UnixMicro(js.TimeUS)
		fmt.Fprintf(w, "  time_us %d (%s, %s ago)\n  seq %d on %s\n  generation %d\n",
			js.TimeUS, at.UTC().Format(time.RFC3339), now.Sub(at).Round(time.Second), js.Seq, orNone(js.Host), r.Generation)
	}
	fmt.Fprintln(w, "feeds")
	for _, f := range r.Feeds {
		fmt.Fprintf(w, "  %s: %d viewers, %d items\n", f.Feed, f.Viewers, f.Items)
	}
	for _, rb := range r.Rebuilds {
		fmt.Fprintf(w, "  rebuild of %s interrupted after viewer %d (started %s); `appview rebuild --feed %s` resumes it\n",
			rb.Feed, rb.AfterViewer, rb.Started.UTC().Format(time.RFC3339), rb.Feed)
	}
	fmt.Fprintln(w, "account backfill")
	var parts []string
	for _, c := range r.Listings {
		parts = append(parts, fmt.Sprintf("%s %d", c.State, c.Count))
	}
	fmt.Fprintf(w, "  %s\n", orNone(strings.Join(parts, ", ")))
	for _, f := range r.Failures {
		fmt.Fprintf(w, "  failed %s %s (attempt %d, next %s): %s\n", f.Account, f.Collection, f.Attempts, f.NextRetry.UTC().Format(time.RFC3339), f.Error)
	}
	fmt.Fprintln(w, "sweep")
	if r.Sweep.LastPassEnd.IsZero() {
		fmt.Fprintf(w, "  cursor at viewer %d, no full pass yet\n", r.Sweep.CursorViewer)
	} else {
		fmt.Fprintf(w, "  cursor at viewer %d, last full pass ended %s (lap %s, %d rows deleted)\n",
			r.Sweep.CursorViewer, r.Sweep.LastPassEnd.UTC().Format(time.RFC3339), r.Sweep.LastPassLap, r.Sweep.LastPassRows)
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
