// Command appview runs the following-timeline appview daemon.
//
//	appview serve [--config FILE]
//	appview version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/atfeeds/appview/appview"
)

// shutdownTimeout bounds the final commit and close after a signal.
const shutdownTimeout = 15 * time.Second

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "appview:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		usage(stderr)
		return errors.New("missing command")
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stderr)
	case "version":
		fmt.Fprintln(stdout, appview.Version)
		return nil
	case "help", "-h", "--help":
		usage(stdout)
		return nil
	}
	usage(stderr)
	return fmt.Errorf("unknown command %q", args[0])
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  appview serve [--config FILE]   run the daemon (built-in defaults without a file)
  appview version                 print the version
`)
}

func serve(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML config file (default: built-in defaults)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := appview.LoadConfig(*configPath)
	if err != nil {
		return err
	}
	logger, err := appview.NewLogger(cfg.Log, stderr)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d, err := appview.Build(ctx, cfg, appview.Options{Logger: logger})
	if err != nil {
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
