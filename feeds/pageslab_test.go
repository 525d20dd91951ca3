package feeds

import (
	"errors"
	"fmt"
	"testing"

	"github.com/atfeeds/appview/internal/freshproc"
)

// The page slab is process-wide and must come before the first connection,
// so each test runs its body in a fresh copy of the test binary.

// fillPageCaches writes and reads enough to put a few hundred pages in the
// store's caches.
func fillPageCaches(t *testing.T, s *Store) {
	t.Helper()
	changes := []Change{follow("alice", "carol", "f1", 1)}
	for i := range 2000 {
		changes = append(changes, post("carol", fmt.Sprintf("p%05d", i), int64(10+i)))
	}
	apply(t, s, changes...)
	if got := feedRKeys(t, s, "following", "alice", postNSID); len(got) == 0 {
		t.Fatal("alice's feed is empty after the fan-out")
	}
}

func TestPageSlabHoldsThePageCaches(t *testing.T) {
	if !freshproc.Run(t) {
		return
	}
	if err := ReservePageSlab(8); err != nil {
		t.Fatalf("reserve: %v", err)
	}
	if err := ReservePageSlab(64); err != nil {
		t.Fatalf("a second reserve returns the first one's result, got %v", err)
	}
	s := MustOpen(t, defaultFeeds)
	fillPageCaches(t, s)

	u, err := PageSlab()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("page caches: %+v", u)
	if u.Slots != 8<<20/4096 {
		t.Errorf("slab of %d slots, want 2048 (8 MiB of 4 KiB pages; the second reserve changed nothing)", u.Slots)
	}
	// A slot is a page and SQLite's header for it, a few hundred bytes:
	// the allocator's 8 KiB slot per page is what the slab avoids.
	if u.SlotBytes <= 4096 || u.SlotBytes > 4096+1024 {
		t.Errorf("slot of %d bytes, want a 4 KiB page and its header", u.SlotBytes)
	}
	if u.UsedSlots < 50 || u.UsedSlots > u.Slots {
		t.Errorf("%d slots in use after filling the caches, want at least 50 and at most %d", u.UsedSlots, u.Slots)
	}
	if u.OverflowBytes != 0 {
		t.Errorf("%d bytes of pages outside the slab, want none: the slab has room for all", u.OverflowBytes)
	}
}

func TestPageSlabAfterAConnectionIsRefused(t *testing.T) {
	if !freshproc.Run(t) {
		return
	}
	s := MustOpen(t, defaultFeeds)
	if err := ReservePageSlab(8); !errors.Is(err, ErrPageSlabTooLate) {
		t.Fatalf("reserve after a connection: %v, want ErrPageSlabTooLate", err)
	}
	fillPageCaches(t, s)
	u, err := PageSlab()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("page caches: %+v", u)
	if u.Slots != 0 || u.UsedSlots != 0 {
		t.Errorf("no slab, yet %d slots with %d used", u.Slots, u.UsedSlots)
	}
	// Without a slab every page is allocated on its own.
	if u.OverflowBytes < 50*4096 {
		t.Errorf("%d bytes of pages allocated one by one, want at least 50 pages' worth", u.OverflowBytes)
	}
}
