package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/atfeeds/appview/feeds"
)

// rebuildCmd serves `appview rebuild --feed NAME`: every viewer's items
// in the feed rebuilt from the stored records and follows, after a change
// of caps or a repair (feeds.RebuildFeed). The position is committed with
// every chunk of viewers, so after Ctrl-C the same command resumes at the
// next viewer. Safe while the daemon runs on the same file.
func rebuildCmd(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	var feed *string
	var chunk *int
	var every *time.Duration
	cfg, err := parseForCommand("rebuild", args, environ, stderr, func(fs *flag.FlagSet) {
		feed = fs.String("feed", "", "the feed to rebuild (required)")
		chunk = fs.Int("chunk", 16, fmt.Sprintf("viewers rebuilt per transaction at most (a transaction also commits after %v)", feeds.DefaultRebuildHold))
		every = progressFlag(fs)
	})
	if err != nil {
		return err
	}
	if *feed == "" {
		return errors.New("rebuild: --feed is required")
	}
	if err := checkFeed(cfg, *feed); err != nil {
		return fmt.Errorf("rebuild: %w", err)
	}
	if *chunk < 1 || *chunk > maxRebuildChunk {
		return fmt.Errorf("rebuild: --chunk must be from 1 to %d", maxRebuildChunk)
	}
	if err := checkProgressEvery(*every); err != nil {
		return fmt.Errorf("rebuild: %w", err)
	}
	store, log, err := openLogged(ctx, cfg, stderr, false)
	if err != nil {
		return err
	}
	defer store.Close()
	rep := newProgress(stderr, log, "rebuild "+*feed, *every)
	first := true
	p, err := store.RebuildFeed(ctx, *feed, feeds.RebuildOptions{
		Chunk: *chunk,
		Progress: func(p feeds.RebuildProgress) {
			if first && p.Resumed {
				log.Info("resuming an interrupted rebuild", "feed", *feed,
					"started", p.Started.UTC().Format(time.RFC3339), "done", p.Done, "total", p.Total)
			}
			first = false
			rep.Update(p.Done, p.Total)
		},
	})
	if err != nil {
		if ctx.Err() != nil {
			rep.Finish("interrupted")
			return fmt.Errorf("rebuild %s: interrupted after %d of %d viewers; run the same command again to resume", *feed, p.Done, p.Total)
		}
		rep.Finish("failed")
		return err
	}
	rep.Finish("done")
	fmt.Fprintf(stdout, "rebuilt feed %s: %d viewers, %d feed items written\n", *feed, p.Done, p.Rows)
	return nil
}

// maxRebuildChunk bounds the viewers one rebuild transaction holds the
// write lock for; the daemon beside it waits for each. The chunk's time
// is bounded too (feeds.DefaultRebuildHold).
const maxRebuildChunk = 1000
