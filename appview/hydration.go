package appview

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/atfeeds/appview/directory"
	"github.com/atfeeds/appview/egress"
	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/pds"
	"github.com/atfeeds/appview/profiles"
)

// buildProfiles wires profile hydration when the config turns it on (nil
// otherwise). It shares the directory, and so its cache, with the
// backfill; its PDS requests have their own limits, so hydration can
// never starve first reads nor the other way round. A PDS host's pause
// after a 429 is shared, though (paused): the host limits us, not one of
// our services.
func buildProfiles(cfg Config, store *feeds.Store, dir *directory.Directory, paused *pds.HostPauses, reg prometheus.Registerer, log *slog.Logger) *profiles.Service {
	h := cfg.Hydration
	if !h.Profiles {
		return nil
	}
	httpc := egress.NewClient(egress.Options{
		AllowPrivateNetworks: cfg.Identity.AllowPrivateNetworks,
		Timeout:              h.FetchTimeout,
		UserAgent:            "atfeeds-appview/" + Version,
	})
	return profiles.New(profiles.Config{
		Wait:         h.FetchWait,
		QueueSize:    h.QueueSize,
		Concurrency:  h.Concurrency,
		PerHost:      h.PerHost,
		FetchTimeout: h.FetchTimeout,
		RetryAfter:   h.RetryAfter,
		HostPauses:   paused,
	}, store, dir, pds.NewClient(httpc, pds.Options{Timeout: h.FetchTimeout}), log, profiles.NewMetrics(reg))
}
