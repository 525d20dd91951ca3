package appview

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/atfeeds/appview/backfill"
	"github.com/atfeeds/appview/directory"
	"github.com/atfeeds/appview/egress"
	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/pds"
)

// buildBackfill wires identity resolution and the first-read backfill:
// one guarded outbound HTTP client for every stranger (PLC, handle
// domains, PDSes). A nil reg registers no metrics. paused is the list of
// rate-limited PDS hosts the backfill shares with the daemon's other PDS
// clients (nil: one of its own).
func buildBackfill(cfg Config, store *feeds.Store, paused *pds.HostPauses, reg prometheus.Registerer, log *slog.Logger) (*directory.Directory, *backfill.Service) {
	httpc := egress.NewClient(egress.Options{
		AllowPrivateNetworks: cfg.Identity.AllowPrivateNetworks,
		Timeout:              cfg.Backfill.RequestTimeout,
		UserAgent:            "atfeeds-appview/" + Version,
	})
	dir := directory.New(directory.Config{
		PLCURL:               cfg.Identity.PLCURL,
		HandleResolverURL:    cfg.Identity.HandleResolverURL,
		HitTTL:               cfg.Identity.CacheTTL,
		ErrTTL:               cfg.Identity.ErrorTTL,
		HTTPClient:           httpc,
		AllowPrivateNetworks: cfg.Identity.AllowPrivateNetworks,
		// The backfill needs only the PDS; handle actors are verified by
		// LookupHandle, which checks the document claims the handle.
		SkipHandleVerification: true,
		OnPause:                identityPauses(reg, log),
	})
	client := pds.NewClient(httpc, pds.Options{Timeout: cfg.Backfill.RequestTimeout})
	var metrics *backfill.Metrics // a nil *Metrics counts nothing
	if reg != nil {
		metrics = backfill.NewMetrics(reg)
	}
	var fs []backfill.Feed
	for _, f := range cfg.Feeds {
		bf := backfill.Feed{Name: f.Name, FollowCollection: syntax.NSID(f.FollowCollection)}
		for _, t := range f.Targets {
			bf.Targets = append(bf.Targets, syntax.NSID(t.Collection))
		}
		fs = append(fs, bf)
	}
	svc := backfill.New(backfill.Config{
		FirstReadWait: cfg.Backfill.FirstReadWait,
		Lease:         cfg.Backfill.FirstReadLease,
		RunTimeout:    cfg.Backfill.FirstReadTimeout,
		Depth:         cfg.Backfill.Depth,
		MaxFollows:    cfg.Backfill.MaxFollows,
		Concurrency:   cfg.Backfill.Concurrency,
		PerHost:       cfg.Backfill.PerHost,
		MaxAttempts:   cfg.Backfill.MaxAttempts,
		ViewerTTL:     cfg.Backfill.ViewerTTL,
		Admission:     cfg.Backfill.Admission.backfillAdmission(),
		HostPauses:    paused,
	}, store, dir, client, fs, log, metrics)
	return dir, svc
}

// FirstReads builds what an operator command needs to run first reads the
// way the daemon does (`appview backfill`): the directory and the
// first-read service of cfg, on store, without metrics (nothing scrapes a
// command).
func FirstReads(cfg Config, store *feeds.Store, log *slog.Logger) (*directory.Directory, *backfill.Service) {
	return buildBackfill(cfg, store, nil, nil, log)
}

// ResolveActor turns an operator's --actor (a DID or a handle) into a DID
// whose DID document names a PDS, so a typo fails before anything is
// written.
func ResolveActor(ctx context.Context, dir *directory.Directory, actor string) (syntax.DID, error) {
	id, err := syntax.ParseAtIdentifier(actor)
	if err != nil {
		return "", fmt.Errorf("actor %q: not a DID or handle", actor)
	}
	var ident *directory.Identity
	if id.IsHandle() {
		ident, err = dir.LookupHandle(ctx, id.Handle())
	} else {
		ident, err = dir.LookupDID(ctx, id.DID())
	}
	if err != nil {
		return "", fmt.Errorf("resolve actor %s: %w", actor, err)
	}
	return ident.DID, nil
}

// handleResolver adapts the directory to the XRPC server's actor lookup.
type handleResolver struct{ dir *directory.Directory }

func (r handleResolver) HandleCached(h syntax.Handle) bool { return r.dir.HandleCached(h) }

func (r handleResolver) ResolveHandle(ctx context.Context, h syntax.Handle) (syntax.DID, error) {
	id, err := r.dir.LookupHandle(ctx, h)
	if err != nil {
		return "", err
	}
	return id.DID, nil
}

// identityPauses counts and logs the pauses the PLC directory and the
// handle resolver ask for with a 429 or 503 (directory.Config.OnPause):
// while one lasts, first reads of new viewers and followee listings wait.
func identityPauses(reg prometheus.Registerer, log *slog.Logger) func(string, int, time.Duration) {
	pauses := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "appview", Subsystem: "identity", Name: "pauses_total",
		Help: "Pauses of identity lookups asked for by a 429 or 503 of the PLC directory or the handle resolver, by service (plc, handle_resolver).",
	}, []string{"service"})
	if reg != nil {
		reg.MustRegister(pauses)
	}
	label := map[string]string{directory.ServicePLC: "plc", directory.ServiceHandleResolver: "handle_resolver"}
	for _, l := range label {
		pauses.WithLabelValues(l) // at 0 from the start, for rate() and alerts
	}
	return func(service string, status int, wait time.Duration) {
		pauses.WithLabelValues(label[service]).Inc()
		log.Warn("identity lookups paused", "service", service, "status", status, "wait", wait.Round(time.Second))
	}
}
