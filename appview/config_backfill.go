package appview

import (
	"net/url"
	"time"

	"github.com/atfeeds/appview/backfill"
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
	// loopback, private and link-local addresses, and PDSes speak plain
	// http: for tests and private networks only, since a DID document
	// could otherwise aim the appview at internal services. Off, a PDS
	// endpoint must be https.
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
	// FirstReadTimeout bounds one first read a getFeed request started;
	// keep it under the lease. A run cut off is retried on the schedule.
	FirstReadTimeout time.Duration `yaml:"first_read_timeout"`
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
	// Admission bounds the first reads that outsiders can start.
	Admission AdmissionConfig `yaml:"admission"`
}

// AdmissionConfig bounds first reads, the expensive thing an outsider can
// trigger (each reaches out to PDSes). A request for an actor that is not
// a viewer yet first takes a token from its client's bucket (429 when
// empty), then a place among the running and queued first reads (503
// when full); existing viewers never pass through either.
type AdmissionConfig struct {
	// MaxRunning first reads run at once. Each lists PDSes and writes, so
	// on a small machine this is also the CPU share new viewers get at the
	// expense of existing ones.
	MaxRunning int `yaml:"max_running"`
	// MaxQueued more may wait for a running slot; 0 means none wait.
	MaxQueued int `yaml:"max_queued"`
	// ClientInterval is the steady pace of new viewers one client (remote
	// address) may ask for: one per interval, ClientBurst at once.
	ClientInterval time.Duration `yaml:"client_interval"`
	ClientBurst    int           `yaml:"client_burst"`
	// MaxClients bounds the client buckets kept in memory.
	MaxClients int `yaml:"max_clients"`
	// RetryAfter is sent with a 503 when the queue is full.
	RetryAfter time.Duration `yaml:"retry_after"`
}

func defaultIdentityConfig() IdentityConfig {
	return IdentityConfig{PLCURL: "https://plc.directory", CacheTTL: time.Hour, ErrorTTL: 2 * time.Minute}
}

func defaultBackfillConfig() BackfillConfig {
	return BackfillConfig{
		FirstReadWait: 3 * time.Second, FirstReadLease: 2 * time.Minute, FirstReadTimeout: 90 * time.Second, Depth: 50, MaxFollows: 10_000,
		Concurrency: 16, PerHost: 4, RequestTimeout: 10 * time.Second, MaxAttempts: 6,
		ViewerTTL: 30 * 24 * time.Hour,
		Admission: AdmissionConfig{
			MaxRunning: backfill.DefaultMaxRunning, MaxQueued: 64,
			ClientInterval: 2 * time.Second, ClientBurst: 10, MaxClients: 10_000,
			RetryAfter: 5 * time.Second,
		},
	}
}

// backfillAdmission translates the admission settings for package
// backfill, where zero values mean defaults and no queue is negative.
func (a AdmissionConfig) backfillAdmission() backfill.AdmissionConfig {
	queued := a.MaxQueued
	if queued == 0 {
		queued = -1
	}
	return backfill.AdmissionConfig{
		PerClientRate:        1 / a.ClientInterval.Seconds(),
		PerClientBurst:       a.ClientBurst,
		MaxRunning:           a.MaxRunning,
		MaxQueued:            queued,
		MaxClients:           a.MaxClients,
		OverloadedRetryAfter: a.RetryAfter,
	}
}

// maxBackfillConcurrency bounds backfill.concurrency, as
// maxHydrationConcurrency bounds the profile fetcher's.
const maxBackfillConcurrency = 1024

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
		"identity.cache_ttl":                 c.Identity.CacheTTL,
		"identity.error_ttl":                 c.Identity.ErrorTTL,
		"backfill.first_read_wait":           c.Backfill.FirstReadWait,
		"backfill.first_read_lease":          c.Backfill.FirstReadLease,
		"backfill.first_read_timeout":        c.Backfill.FirstReadTimeout,
		"backfill.request_timeout":           c.Backfill.RequestTimeout,
		"backfill.viewer_ttl":                c.Backfill.ViewerTTL,
		"backfill.admission.client_interval": c.Backfill.Admission.ClientInterval,
		"backfill.admission.retry_after":     c.Backfill.Admission.RetryAfter,
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
	// A run renews its claim every third of the lease: a lease of a few
	// nanoseconds made that ticker's interval 0, and the daemon panicked.
	if d := c.Backfill.FirstReadLease; d > 0 && d < 100*time.Millisecond {
		fail("backfill.first_read_lease", "must be at least 100ms, got %s", d)
	}
	// A viewer's last read is written at most once an hour (the backfill
	// remembers it complete that long): a shorter ttl retired viewers who
	// were reading.
	if d := c.Backfill.ViewerTTL; d > 0 && d < 2*time.Hour {
		fail("backfill.viewer_ttl", "must be at least 2h, got %s", d)
	}
	// The service starts a worker for every four request slots: a huge
	// value would end the process out of memory instead of with this error.
	if c.Backfill.Concurrency > maxBackfillConcurrency {
		fail("backfill.concurrency", "must be at most %d, got %d", maxBackfillConcurrency, c.Backfill.Concurrency)
	}
	if c.Backfill.Depth > 10_000 {
		fail("backfill.depth", "must be at most 10000, got %d", c.Backfill.Depth)
	}
	c.Backfill.Admission.validate(fail)
}

// Upper bounds keep a typo (an extra zero or three) from switching a
// bound off in effect.
func (a AdmissionConfig) validate(fail func(field, format string, args ...any)) {
	within := func(field string, n, lo, hi int) {
		if n < lo || n > hi {
			fail(field, "must be from %d to %d, got %d", lo, hi, n)
		}
	}
	within("backfill.admission.max_running", a.MaxRunning, 1, 1024)
	within("backfill.admission.max_queued", a.MaxQueued, 0, 100_000)
	within("backfill.admission.client_burst", a.ClientBurst, 1, 10_000)
	within("backfill.admission.max_clients", a.MaxClients, 1, 10_000_000)
	if a.ClientInterval > 24*time.Hour {
		fail("backfill.admission.client_interval", "must be at most 24h, got %s", a.ClientInterval)
	}
	if a.RetryAfter > time.Hour {
		fail("backfill.admission.retry_after", "must be at most 1h, got %s", a.RetryAfter)
	}
}
