package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/atfeeds/appview/appview"
	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/progress"
)

// openLogged opens the configured database and the daemon's logger on
// stderr, for the long commands that log their progress. With create, a
// database that does not exist yet is made, and the log says where.
func openLogged(ctx context.Context, cfg appview.Config, stderr io.Writer, create bool) (*feeds.Store, *slog.Logger, error) {
	log, err := appview.NewLogger(cfg.Log, stderr)
	if err != nil {
		return nil, nil, err
	}
	if !create {
		store, err := appview.OpenStore(ctx, cfg)
		return store, log, err
	}
	store, created, err := appview.OpenOrCreateStore(ctx, cfg)
	if created && err == nil {
		log.Warn("created a new database: the daemon has not run on this path", "path", appview.DatabasePath(cfg))
	}
	return store, log, err
}

// progressFlag adds --progress-every, the interval of the progress log
// lines when stderr is not a terminal.
func progressFlag(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("progress-every", 5*time.Second, "interval of progress log lines when stderr is not a terminal")
}

// checkProgressEvery refuses an interval the reporter would silently
// replace with its default.
func checkProgressEvery(every time.Duration) error {
	if every <= 0 {
		return fmt.Errorf("--progress-every %s: must be positive", every)
	}
	return nil
}

// newProgress reports a long command's progress on stderr: a bar on a
// terminal, log lines through the daemon's logger otherwise.
func newProgress(stderr io.Writer, log *slog.Logger, task string, every time.Duration) *progress.Reporter {
	return progress.New(stderr, progress.Options{
		Task: task, Terminal: progress.IsTerminal(stderr), Every: every, Logger: log,
	})
}

// checkFeed fails with the configured names when feed is not one of them.
func checkFeed(cfg appview.Config, feed string) error {
	var names []string
	for _, f := range cfg.Feeds {
		if f.Name == feed {
			return nil
		}
		names = append(names, f.Name)
	}
	return fmt.Errorf("unknown feed %q (configured: %s)", feed, strings.Join(names, ", "))
}
