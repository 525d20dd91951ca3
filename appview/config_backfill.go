package appview

import (
	"net/url"
	"time"
)

// IdentityConfig says how DIDs and handles are resolved.
type IdentityConfig struct {
	// PLCURL is the did:plc directory.
	PLCURL string `yaml:"plc_url"`
	// HandleResolverURL, when set, is an XRPC service answering
	// com.atproto.identity.resolveHandle, used instead of DNS and HTTPS
	// (local networks with .test handles need it).
	HandleResolverURL string        `yaml:"handle_resolver_url"`
	CacheTTL          time.Duration `yaml:"cache_ttl"`
	ErrorTTL          time.Duration `yaml:"error_ttl"`
	// AllowPrivateNetworks lets DID documents, handles and PDSes point at
	// loopback, private and link-local addresses: for tests and private
	// networks only, since a DID document could otherwise aim the appview
	// at internal services.
	AllowPrivateNetworks bool `yaml:"allow_private_networks"`
}

// BackfillConfig bounds the first-read backfill from PDSes.
type BackfillConfig struct {
	// FirstReadWait is how long getFeed waits for a first read before it
	// answers with what is there.
	FirstReadWait time.Duration `yaml:"first_read_wait"`
	// FirstReadLease is how long a first-read claim holds: a run cut short
	// by a crash keeps its viewer waiting this long before the restarted
	// daemon (whose claims carry a new owner) may take it over.
	FirstReadLease time.Duration `yaml:"first_read_lease"`
	// Depth is how many of an account's newest records per target
	// collection are fetched.
	Depth int `yaml:"depth"`
	// MaxFollows bounds the follow records listed for one viewer.
	MaxFollows int `yaml:"max_follows"`
	// Concurrency and PerHost bound PDS requests in flight.
	Concurrency    int           `yaml:"concurrency"`
	PerHost        int           `yaml:"per_host"`
	RequestTimeout time.Duration `yaml:"request_timeout"`
	MaxAttempts    int           `yaml:"max_attempts"`
	// ViewerTTL retires a viewer who has not read for this long: its feed
	// rows go and its next read is a first read again.
	ViewerTTL time.Duration `yaml:"viewer_ttl"`
}

func defaultIdentityConfig() IdentityConfig {
	return IdentityConfig{PLCURL: "https://plc.directory", CacheTTL: time.Hour, ErrorTTL: 2 * time.Minute}
}

func defaultBackfillConfig() BackfillConfig {
	return BackfillConfig{
		FirstReadWait: 3 * time.Second, FirstReadLease: 2 * time.Minute, Depth: 50, MaxFollows: 10_000,
		Concurrency: 16, PerHost: 4, RequestTimeout: 10 * time.Second, MaxAttempts: 6,
		ViewerTTL: 30 * 24 * time.Hour,
	}
}

func (c Config) validateBackfill(fail func(field, format string, args ...any)) {
	checkHTTPURL := func(field, raw string, required bool) {
		if raw == "" {
			if required {
				fail(field, "must not be empty")
			}
			return
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			fail(field, "must be an http(s) URL")
		}
	}
	checkHTTPURL("identity.plc_url", c.Identity.PLCURL, true)
	checkHTTPURL("identity.handle_resolver_url", c.Identity.HandleResolverURL, false)
	positive := map[string]time.Duration{
		"identity.cache_ttl":        c.Identity.CacheTTL,
		"identity.error_ttl":        c.Identity.ErrorTTL,
		"backfill.first_read_wait":  c.Backfill.FirstReadWait,
		"backfill.first_read_lease": c.Backfill.FirstReadLease,
		"backfill.request_timeout":  c.Backfill.RequestTimeout,
		"backfill.viewer_ttl":       c.Backfill.ViewerTTL,
	}
	for field, d := range positive {
		if d <= 0 {
			fail(field, "must be positive")
		}
	}
	for field, n := range map[string]int{
		"backfill.depth":        c.Backfill.Depth,
		"backfill.max_follows":  c.Backfill.MaxFollows,
		"backfill.concurrency":  c.Backfill.Concurrency,
		"backfill.per_host":     c.Backfill.PerHost,
		"backfill.max_attempts": c.Backfill.MaxAttempts,
	} {
		if n <= 0 {
			fail(field, "must be positive")
		}
	}
	if c.Backfill.Depth > 10_000 {
		fail("backfill.depth", "must be at most 10000, got %d", c.Backfill.Depth)
	}
}
