package appview

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/jetstream"
)

// maxWantedCollections is Jetstream's limit on wantedCollections.
const maxWantedCollections = 100

// minIdleTimeout is the shortest jetstream.idle_timeout other than 0:
// Jetstream's ping interval, the least silence that says anything about a
// host.
const minIdleTimeout = 30 * time.Second

// minReadTimeout is the shortest jetstream.read_timeout: Jetstream's ping
// interval and time for the ping to arrive. At exactly the interval, each
// ping of a quiet stream raced the deadline it was meant to renew, and a
// late one ended a healthy session.
const minReadTimeout = minIdleTimeout + 10*time.Second

// minRetentionWindow is the shortest jetstream.retention_window: twice
// a failover's rewind, and longer than a routine restart.
const minRetentionWindow = 10 * time.Minute

// maxBatchInterval bounds ingest.max_batch_interval: a feed may lag the
// stream by that much under load, and a minute is already far past what a
// reader of a timeline would wait for.
const maxBatchInterval = time.Minute

var (
	feedNameRegex = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$`)
	logLevels     = []string{"debug", "info", "warn", "error"}
	logFormats    = []string{"text", "json"}
)

// Validate reports every invalid field of c at once, joined with
// errors.Join. Each error starts with the field's path in the YAML file,
// such as "feeds[0].targets[1].cap: must be positive".
func (c Config) Validate() error {
	var errs []error
	fail := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}

	if n := c.Database.CacheMB; n < 2 || n > 16384 {
		fail("database.cache_mb", "must be between 2 and 16384")
	}
	if n := c.Database.ReadMmapMB; n < 0 || n > 1<<20 {
		fail("database.read_mmap_mb", "must be between 0 and 1048576")
	}
	if n := c.Database.RecordCacheMB; n < 0 || n > 1<<20 {
		fail("database.record_cache_mb", "must be between 0 and 1048576")
	}
	if c.Database.Path == "" {
		fail("database.path", "must not be empty")
	}
	c.validateBackfill(fail)
	c.validateSweep(fail)
	c.validateNotify(fail)
	c.validateHydration(fail)
	c.validateMemory(fail)

	js := c.Jetstream
	if len(js.URLs) == 0 {
		fail("jetstream.urls", "must list at least one URL")
	}
	for i, raw := range js.URLs {
		if err := checkJetstreamURL(raw); err != nil {
			fail(fmt.Sprintf("jetstream.urls[%d]", i), "%v", err)
		}
	}
	if js.Rewind < 0 {
		fail("jetstream.rewind", "must not be negative")
	}
	if js.MaxFrameBytes <= 0 || js.MaxFrameBytes > jetstream.MaxMaxFrameBytes {
		fail("jetstream.max_frame_bytes", "must be between 1 and %d", jetstream.MaxMaxFrameBytes)
	}
	if js.ReadTimeout < minReadTimeout {
		// Jetstream pings every 30 s: shorter, a quiet stream ends its
		// session between two pings and the consumer reconnects again
		// and again.
		fail("jetstream.read_timeout", "must be at least %v (Jetstream pings every 30s), got %v", minReadTimeout, js.ReadTimeout)
	}
	if js.IdleTimeout < 0 || (js.IdleTimeout > 0 && js.IdleTimeout < minIdleTimeout) {
		// Shorter, every session would end before the host's first event
		// on a quiet moment, and the consumer would cycle through its URLs
		// delivering nothing (an idle ending resets the backoff).
		fail("jetstream.idle_timeout", "must be 0 (never) or at least %v, got %v", minIdleTimeout, js.IdleTimeout)
	}
	if js.QueueSize <= 0 || js.QueueSize > 1_000_000 {
		// A channel of events is allocated whole at start: a huge value
		// would end the process out of memory instead of with this error.
		fail("jetstream.queue_size", "must be between 1 and 1000000")
	}
	if js.RetentionWindow < minRetentionWindow {
		// A stored cursor older than the window at reconnect is a
		// recorded gap, and every viewer's feed is rebuilt from the PDSes
		// at its next read: with a window of seconds (1m typed for 1h),
		// every restart would do that.
		fail("jetstream.retention_window", "must be at least %v, got %v", minRetentionWindow, js.RetentionWindow)
	}

	if n := c.Ingest.BatchSize; n < 1 || n > 100000 {
		fail("ingest.batch_size", "must be between 1 and 100000")
	}
	if n := c.Ingest.CatchupBatchSize; n < 0 || n > 100000 {
		fail("ingest.catchup_batch_size", "must be between 0 and 100000")
	}
	if c.Ingest.BatchInterval <= 0 {
		fail("ingest.batch_interval", "must be positive")
	}
	if d := c.Ingest.MaxBatchInterval; d < 0 || d > maxBatchInterval {
		fail("ingest.max_batch_interval", "must be between 0 and %s", maxBatchInterval)
	}

	c.validateHTTP(fail)

	if _, err := syntax.ParseNSID(c.XRPC.Namespace + ".getFeed"); err != nil {
		fail("xrpc.namespace", "must be an NSID prefix such as com.example.appview, so that %q is an NSID", c.XRPC.Namespace+".getFeed")
	}
	c.XRPC.HandleLookups.validate(fail)

	if !slices.Contains(logLevels, c.Log.Level) {
		fail("log.level", "%q: must be one of %s", c.Log.Level, strings.Join(logLevels, ", "))
	}
	if !slices.Contains(logFormats, c.Log.Format) {
		fail("log.format", "%q: must be one of %s", c.Log.Format, strings.Join(logFormats, ", "))
	}

	names := make(map[string]int)
	for i, f := range c.Feeds {
		p := fmt.Sprintf("feeds[%d]", i)
		if !feedNameRegex.MatchString(f.Name) {
			fail(p+".name", "%q: must be 1 to 64 letters, digits, '_' or '-', starting with a letter or digit", f.Name)
		} else if j, dup := names[f.Name]; dup {
			fail(p+".name", "duplicate of feeds[%d].name %q", j, f.Name)
		} else {
			names[f.Name] = i
		}
		if err := checkCollection(f.FollowCollection); err != nil {
			fail(p+".follow_collection", "%v", err)
		}
		if f.MergeLimit < 0 {
			fail(p+".merge_limit", "must not be negative")
		}
		if len(f.Targets) == 0 {
			fail(p+".targets", "must list at least one target")
		}
		seen := make(map[string]int)
		for j, t := range f.Targets {
			tp := fmt.Sprintf("%s.targets[%d]", p, j)
			if err := checkCollection(t.Collection); err != nil {
				fail(tp+".collection", "%v", err)
			} else if t.Collection == f.FollowCollection {
				fail(tp+".collection", "must differ from the feed's follow_collection")
			} else if k, dup := seen[t.Collection]; dup {
				fail(tp+".collection", "duplicate of targets[%d].collection %q", k, t.Collection)
			} else {
				seen[t.Collection] = j
			}
			if t.Cap <= 0 {
				fail(tp+".cap", "must be positive")
			} else if t.Cap > maxTargetCap {
				fail(tp+".cap", "must be at most %d", maxTargetCap)
			}
			validateFields(fail, tp, t.Fields)
		}
	}
	// A collection is stored either as follows or as target records, and
	// its listing is one row per account: one feed's follow collection
	// cannot be another's target.
	follows := make(map[string]int)
	for i, f := range c.Feeds {
		if _, seen := follows[f.FollowCollection]; !seen {
			follows[f.FollowCollection] = i
		}
	}
	for i, f := range c.Feeds {
		for j, t := range f.Targets {
			if k, ok := follows[t.Collection]; ok && k != i && t.Collection != f.FollowCollection {
				fail(fmt.Sprintf("feeds[%d].targets[%d].collection", i, j), "%q is feeds[%d].follow_collection; a collection cannot be both", t.Collection, k)
			}
		}
	}
	if n := len(c.WantedCollections()); n > maxWantedCollections {
		fail("feeds", "name %d distinct collections; Jetstream accepts at most %d", n, maxWantedCollections)
	}

	return errors.Join(errs...)
}

// checkCollection accepts an NSID in its normalized form. Jetstream
// matches collections as exact strings, so a collection spelled with an
// upper-case authority would never match a record.
func checkCollection(raw string) error {
	nsid, err := syntax.ParseNSID(raw)
	if err != nil {
		return fmt.Errorf("invalid NSID %q: %w", raw, err)
	}
	if n := nsid.Normalize(); n != nsid {
		return fmt.Errorf("NSID %q must be written %q (lower-case authority)", raw, n)
	}
	return nil
}

// checkJetstreamURL accepts an absolute ws:// or wss:// URL without query
// or fragment (the consumer sets the query parameters itself) or user
// information (the websocket dialer refuses it, and the daemon logs and
// shows its Jetstream URLs). Its messages never print user information.
func checkJetstreamURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // without the URL, which may hold a password
		}
		return fmt.Errorf("invalid URL %q: %w", redactUserinfo(raw), err)
	}
	switch {
	case u.User != nil:
		return fmt.Errorf("URL %q: must not carry user information (a password or token): the websocket dialer refuses it", redactUserinfo(raw))
	case u.Scheme != "ws" && u.Scheme != "wss":
		return fmt.Errorf("URL %q: scheme must be ws or wss", raw)
	case u.Host == "":
		return fmt.Errorf("URL %q: missing host", raw)
	case u.RawQuery != "" || u.ForceQuery:
		return fmt.Errorf("URL %q: must not carry a query; the consumer sets wantedCollections and cursor itself", raw)
	case u.Fragment != "":
		return fmt.Errorf("URL %q: must not carry a fragment", raw)
	}
	return nil
}
