package appview

import (
	"testing"

	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/internal/freshproc"
	"github.com/atfeeds/appview/jetstream/jetstreamtest"
)

// The first daemon of a process gets a page slab sized for its store's
// caches, and /metrics shows what the caches hold in it.
func TestDaemonPutsItsPageCachesInASlab(t *testing.T) {
	if !freshproc.Run(t) {
		return
	}
	js := jetstreamtest.NewServer()
	defer js.Close()
	cfg := testConfig(t, js, t.TempDir()+"/appview.db")
	cfg.Database.CacheMB = 16
	td := startDaemon(t, js, cfg)
	js.Append(
		jetstreamtest.Follow(followNSID, user("alice"), "f1", user("carol"), t0+1),
		jetstreamtest.Post(user("carol"), "p1", t0+2, "one"),
	)
	td.waitCursor(t, t0+2)

	u, err := feeds.PageSlab()
	if err != nil {
		t.Fatal(err)
	}
	// 16 MiB for the writer, 2 for each of 4 readers, 8 for temp tables.
	if want := int64(32 << 20 / 4096); u.Slots != want {
		t.Errorf("slab of %d slots, want %d: one 4 KiB page each for the 32 MiB of caches", u.Slots, want)
	}
	if got, want := td.metricValue(t, "appview_sqlite_page_slab_bytes"), float64(u.Slots*u.SlotBytes); got != want {
		t.Errorf("appview_sqlite_page_slab_bytes = %v, want %v", got, want)
	}
	if got := td.metricValue(t, "appview_sqlite_page_slab_used_bytes"); got <= 0 {
		t.Errorf("appview_sqlite_page_slab_used_bytes = %v after a batch, want pages in the slab", got)
	}
	if got := td.metricValue(t, "appview_sqlite_page_overflow_bytes"); got != 0 {
		t.Errorf("appview_sqlite_page_overflow_bytes = %v, want 0: the slab holds every cache", got)
	}
}
