package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/bluesky-social/indigo/atproto/syntax"
	"io"
	"time"

	"github.com/atfeeds/appview/appview"
	"github.com/atfeeds/appview/backfill"
)

// backfillCmd serves `appview backfill --actor DID|HANDLE [--feed NAME]`:
// a viewer's first read run from the command line, so an operator can
// prepare feeds before their readers arrive. It is the daemon's first read
// (backfill.RunFirstRead) without the per-client admission; every listing
// page is committed with its cursor, so after Ctrl-C the same command
// resumes where it stopped. Safe while the daemon runs on the same file.
func backfillCmd(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	var actor, feed *string
	var every *time.Duration
	cfg, err := parseForCommand("backfill", args, environ, stderr, func(fs *flag.FlagSet) {
		actor = fs.String("actor", "", "the viewer, a DID or a handle (required)")
		feed = fs.String("feed", "", "only this feed (default: every configured feed)")
		every = progressFlag(fs)
	})
	if err != nil {
		return err
	}
	if *actor == "" {
		return errors.New("backfill: --actor is required")
	}
	if err := checkProgressEvery(*every); err != nil {
		return fmt.Errorf("backfill: %w", err)
	}
	var names []string
	if *feed != "" {
		if err := checkFeed(cfg, *feed); err != nil {
			return fmt.Errorf("backfill: %w", err)
		}
		names = []string{*feed}
	} else {
		for _, f := range cfg.Feeds {
			names = append(names, f.Name)
		}
	}
	// Checked before the store opens, which creates a missing file: a
	// typo must leave nothing behind (a review found an empty database
	// left in the directory, which later commands then read as empty).
	if _, err := syntax.ParseAtIdentifier(*actor); err != nil {
		return fmt.Errorf("backfill: actor %q: not a DID or handle", *actor)
	}
	store, log, err := openLogged(ctx, cfg, stderr, true)
	if err != nil {
		return err
	}
	defer store.Close()
	dir, svc := appview.FirstReads(cfg, store, log)
	did, err := appview.ResolveActor(ctx, dir, *actor)
	if err != nil {
		return fmt.Errorf("backfill: %w", err)
	}
	for _, name := range names {
		// Listing the viewer's follows comes first, before there is a
		// total to show.
		log.Info("first read", "actor", did, "feed", name)
		rep := newProgress(stderr, log, "backfill "+name, *every)
		res, err := svc.RunFirstRead(ctx, did, name, rep.Update)
		switch {
		case err != nil && ctx.Err() != nil:
			rep.Finish("interrupted")
			return fmt.Errorf("backfill %s %s: interrupted; run the same command again to resume", did, name)
		case errors.Is(err, backfill.ErrNotDue):
			rep.Finish("failed")
			return fmt.Errorf("backfill %s %s: %w (`appview cursor reset viewer %s --feed %s` clears the schedule)", did, name, err, did, name)
		case errors.Is(err, backfill.ErrClaimedElsewhere):
			return fmt.Errorf("backfill %s %s: %w (a daemon or another command is running it; try again when it ends)", did, name, err)
		case err != nil:
			rep.Finish("failed")
			return fmt.Errorf("backfill %s %s: %w", did, name, err)
		case res.AlreadyComplete:
			fmt.Fprintf(stdout, "%s %s: already complete\n", did, name)
		default:
			rep.Finish("done")
			fmt.Fprintf(stdout, "%s %s: first read complete, %d feed items\n", did, name, res.Rows)
		}
	}
	return nil
}
