package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/atfeeds/appview/appview"
)

// health probes a running daemon and succeeds only on a 200: the Docker
// HEALTHCHECK, since the distroless image has no curl. Without --url it
// probes the address the config (file and APPVIEW_ variables) listens
// on, from the loopback interface; nothing else of the config is checked.
func health(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := fs.String("url", "", "base URL of the daemon (default: from http.listen, e.g. http://127.0.0.1:8080)")
	ready := fs.Bool("ready", false, "probe readiness (/readyz) instead of liveness (/xrpc/_health)")
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this long")
	configPath := fs.String("config", "", "YAML config file to read http.listen from, when --url is not given")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("health: unexpected argument %q", fs.Arg(0))
	}
	if *base == "" {
		listen, err := appview.ListenAddress(*configPath, environ)
		if err != nil {
			return err
		}
		if *base, err = probeURL(listen); err != nil {
			return err
		}
	}
	path := "/xrpc/_health"
	if *ready {
		path = "/readyz"
	}
	target := strings.TrimSuffix(*base, "/") + path

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return fmt.Errorf("health: read %s: %w", target, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health: GET %s: status %d: %s", target, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	_, err = fmt.Fprintf(stdout, "%s\n", strings.TrimSpace(string(body)))
	return err
}

// probeURL turns a listen address into the URL a local probe uses: a
// wildcard host becomes the loopback address of its family.
func probeURL(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("health: http.listen %q: %w", listen, err)
	}
	if port == "0" {
		return "", fmt.Errorf("health: http.listen %q picks a random port; pass --url", listen)
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port), nil
}
