package backfill

import (
	"fmt"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// A full memory whose pruning freed only an entry or two was full again
// at the next insert, and scanned whole again: with 100,000 viewers read
// within the hour, every new one cost a scan of them all under the
// service's lock. A prune that frees less than a quarter of the bound
// now starts the memory over, so the scans are paid for by the room they
// make.
func TestAFullViewerMemoDoesNotScanAtEveryInsert(t *testing.T) {
	const bound = 100
	v := newViewerMemo(bound)
	now := time.Unix(1_000_000, 0)
	key := func(i int) viewerKey { return viewerKey{syntax.DID(fmt.Sprintf("did:plc:v%d", i)), "following"} }
	scanned := 0
	// Entries at or before now are stale; viewer i is fresh for i hours
	// more, so each later insert finds one more to drop.
	stale := func(t time.Time) bool { scanned++; return !t.After(now) }
	for i := range bound {
		v.set(key(i), now.Add(time.Duration(i)*time.Hour), stale)
	}
	if scanned != 0 {
		t.Fatalf("%d entries scanned before the memory was full", scanned)
	}
	const inserts = 50
	for i := range inserts {
		now = now.Add(time.Hour)
		v.set(key(bound+i), now.Add(1000*time.Hour), stale)
	}
	if len(v.m) > bound {
		t.Fatalf("%d entries held, bound %d", len(v.m), bound)
	}
	if scanned > 3*bound {
		t.Errorf("%d inserts into a full memory scanned %d entries: a scan of all of them at nearly every insert", inserts, scanned)
	}
}
