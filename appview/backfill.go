package appview

import (
	"context"
	"log/slog"

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
// domains, PDSes).
func buildBackfill(cfg Config, store *feeds.Store, reg prometheus.Registerer, log *slog.Logger) (*directory.Directory, *backfill.Service) {
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
	})
	client := pds.NewClient(httpc, pds.Options{Timeout: cfg.Backfill.RequestTimeout})
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
		Depth:         cfg.Backfill.Depth,
		MaxFollows:    cfg.Backfill.MaxFollows,
		Concurrency:   cfg.Backfill.Concurrency,
		PerHost:       cfg.Backfill.PerHost,
		MaxAttempts:   cfg.Backfill.MaxAttempts,
		ViewerTTL:     cfg.Backfill.ViewerTTL,
		Admission:     cfg.Backfill.Admission.backfillAdmission(),
	}, store, dir, client, fs, log, backfill.NewMetrics(reg))
	return dir, svc
}

// handleResolver adapts the directory to the XRPC server's actor lookup.
type handleResolver struct{ dir *directory.Directory }

func (r handleResolver) ResolveHandle(ctx context.Context, h syntax.Handle) (syntax.DID, error) {
	id, err := r.dir.LookupHandle(ctx, h)
	if err != nil {
		return "", err
	}
	return id.DID, nil
}
