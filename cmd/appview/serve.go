package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/atfeeds/appview/appview"
)

// shutdownTimeout bounds the final commit and close after a signal.
const shutdownTimeout = 15 * time.Second

// serve runs the daemon until ctx ends (SIGINT or SIGTERM), then commits
// and closes. A signal is a clean exit: nil, so the exit code is 0.
func serve(ctx context.Context, args, environ []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML config file (default: built-in defaults)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))
	}
	cfg, err := appview.LoadConfigEnv(*configPath, environ)
	if err != nil {
		return err
	}
	logger, err := appview.NewLogger(cfg.Log, stderr)
	if err != nil {
		return err
	}
	logger.Info("starting appview", "version", appview.Version, "commit", appview.BuildCommit(),
		"go", appview.GoVersion(), "config_file", *configPath)
	// Config is a slog.LogValuer that redacts secrets.
	logger.Info("effective config", "config", cfg)

	d, err := appview.Build(ctx, cfg, appview.Options{Logger: logger})
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			// A signal while the database opened (a long migration): each
			// migration is a transaction, rolled back and applied again at
			// the next start, and nothing else was written.
			logger.Info("appview stopped before it started")
			return nil
		}
		return err
	}
	runErr := d.Run(ctx)
	closeCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := d.Close(closeCtx); err != nil && runErr == nil {
		runErr = fmt.Errorf("close: %w", err)
	}
	if runErr == nil {
		logger.Info("appview stopped cleanly")
	}
	return runErr
}
