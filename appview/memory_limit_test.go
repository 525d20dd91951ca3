package appview

import (
	"math"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/atfeeds/appview/jetstream/jetstreamtest"
)

// keepGoLimit restores the process's Go memory limit after a test that
// builds daemons setting it, so the tests after it run as before.
func keepGoLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
}

func TestTheGoMemoryLimitFollowsTheRecordCache(t *testing.T) {
	keepGoLimit(t)
	t.Setenv("GOMEMLIMIT", "")
	js := jetstreamtest.NewServer()
	t.Cleanup(js.Close)
	cfg := testConfig(t, js, t.TempDir()+"/appview.db")
	cfg.Database.RecordCacheMB = 40
	td := startDaemon(t, js, cfg)

	want := int64(2*40+goLimitHeadroomMB) << 20
	if got := debug.SetMemoryLimit(-1); got != want {
		t.Errorf("Go memory limit %d, want %d (twice record_cache_mb 40 plus %d MiB)", got, want, goLimitHeadroomMB)
	}
	if got := td.metricValue(t, "go_gc_gomemlimit_bytes"); got != float64(want) {
		t.Errorf("go_gc_gomemlimit_bytes %v, want %d", got, want)
	}
}

func TestTheGoMemoryLimitIsConfigured(t *testing.T) {
	keepGoLimit(t)
	js := jetstreamtest.NewServer()
	t.Cleanup(js.Close)
	build := func(limitMB int) {
		t.Helper()
		cfg := testConfig(t, js, t.TempDir()+"/appview.db")
		cfg.Memory.GoLimitMB = limitMB
		d, err := Build(t.Context(), cfg, Options{Logger: testLogger(t)})
		if err != nil {
			t.Fatalf("build: %v", err)
		}
		if err := d.Close(t.Context()); err != nil {
			t.Fatalf("close: %v", err)
		}
	}
	t.Run("set", func(t *testing.T) {
		t.Setenv("GOMEMLIMIT", "")
		build(300)
		if got, want := debug.SetMemoryLimit(-1), int64(300)<<20; got != want {
			t.Errorf("limit %d, want %d", got, want)
		}
	})
	t.Run("negative: none", func(t *testing.T) {
		t.Setenv("GOMEMLIMIT", "")
		debug.SetMemoryLimit(100 << 20)
		build(-1)
		if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
			t.Errorf("limit %d, want none (%d)", got, int64(math.MaxInt64))
		}
	})
	t.Run("GOMEMLIMIT wins", func(t *testing.T) {
		// The runtime read GOMEMLIMIT when the process started; the
		// daemon leaves what it set alone.
		t.Setenv("GOMEMLIMIT", "200MiB")
		debug.SetMemoryLimit(200 << 20)
		build(300)
		if got, want := debug.SetMemoryLimit(-1), int64(200)<<20; got != want {
			t.Errorf("limit %d, want GOMEMLIMIT's %d", got, want)
		}
	})
}

func TestAGoMemoryLimitBelowTheRecordCacheIsRefused(t *testing.T) {
	for _, c := range []struct {
		limit, recordCache int
		ok                 bool
	}{
		{limit: 0, recordCache: 32, ok: true},
		{limit: -1, recordCache: 32, ok: true},
		{limit: 64, recordCache: 32, ok: true},
		{limit: 63, recordCache: 32, ok: false},
		{limit: 1024, recordCache: 512, ok: true},
		{limit: 64, recordCache: 0, ok: true},
		{limit: 63, recordCache: 0, ok: false},
		// Below the rest of the heap: with no record cache, 1 MiB made
		// 56 collections where the derived limit made 6 (a review).
		{limit: 1, recordCache: 0, ok: false},
		{limit: maxGoLimitMB + 1, recordCache: 32, ok: false},
	} {
		cfg := DefaultConfig()
		cfg.Memory.GoLimitMB = c.limit
		cfg.Database.RecordCacheMB = c.recordCache
		err := cfg.Validate()
		if refused := err != nil && strings.Contains(err.Error(), "memory.go_limit_mb"); refused == c.ok {
			t.Errorf("go_limit_mb %d with record_cache_mb %d: err %v, want ok=%v", c.limit, c.recordCache, err, c.ok)
		}
	}
}
