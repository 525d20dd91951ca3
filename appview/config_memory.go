package appview

// MemoryConfig bounds the daemon's Go memory. SQLite's page caches live
// in their own slab (database.cache_mb), outside the Go runtime; what the
// runtime holds is the record cache, decoded events, requests and the
// ingester's batches, and with the collector's default pacing it grows to
// twice what is live between collections. While getFeed is read during a
// catch-up that took peak RSS from about 220 to 305–310 MiB at 10,000
// viewers; a soft limit of 128 MiB held it at 256–259 MiB at no measured cost
// (docs/benchmarks.md, twenty-seventh and twenty-eighth rounds).
type MemoryConfig struct {
	// GoLimitMB is the Go runtime's soft memory limit in MiB
	// (runtime/debug.SetMemoryLimit): near it the collector runs sooner
	// rather than let the heap double. 0 derives it from the record
	// cache (goLimitMB); negative sets none. GOMEMLIMIT in the
	// environment wins over both.
	GoLimitMB int `yaml:"go_limit_mb"`
}

// maxGoLimitMB bounds memory.go_limit_mb: 1 TiB.
const maxGoLimitMB = 1 << 20

// goLimitHeadroomMB is what the derived limit allows beside twice the
// record cache: the live heap other than the cache (decoding, requests,
// the ingester's part, the actor and follow caches) measured at 38 MiB
// with 10,000 viewers and 47 MiB with 100,000.
const goLimitHeadroomMB = 64

// goLimitMB is the limit the daemon sets, in MiB, or 0 for none: the
// configured one, or twice the record cache plus goLimitHeadroomMB. Twice,
// because the cache's entries are replaced as new posts come in and the
// replaced ones stay on the heap until a collection.
func (c Config) goLimitMB() int {
	switch n := c.Memory.GoLimitMB; {
	case n < 0:
		return 0
	case n > 0:
		return n
	default:
		return 2*c.Database.RecordCacheMB + goLimitHeadroomMB
	}
}

// minGoLimitMB is the least memory.go_limit_mb: the heap beside the
// record cache was 38-47 MiB live when measured.
const minGoLimitMB = 64

func (c Config) validateMemory(fail func(field, format string, args ...any)) {
	if n := c.Memory.GoLimitMB; n > maxGoLimitMB {
		fail("memory.go_limit_mb", "must be at most %d (negative: no limit, 0: derived from database.record_cache_mb)", maxGoLimitMB)
	} else if least := max(2*c.Database.RecordCacheMB, minGoLimitMB); n > 0 && n < least {
		// Below what the record cache keeps live, or below the rest of
		// the heap (38-47 MiB live when measured), the collector would
		// run all the time and take up to half the CPU. A limit under
		// the derived one (twice the cache plus 64) is the operator's
		// call on a small machine.
		fail("memory.go_limit_mb", "must be at least twice database.record_cache_mb and at least %d (%d), or 0 to derive it, or negative for no limit", minGoLimitMB, least)
	}
}
