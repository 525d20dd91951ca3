package feeds

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// actorCacheBytes sums the DIDs the writer's actor cache holds, with each
// entry's overhead.
func actorCacheBytes(s *Store) (entries, bytes int) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	for d := range s.actorIDs.ids {
		bytes += len(d) + didEntryOverhead
	}
	return len(s.actorIDs.ids), bytes
}

// The writer's actor cache was bounded at 500,000 entries, but a follow's
// subject is any DID its author wrote, up to 2 KiB: a viewer following
// 500,000 made-up DIDs of that length filled it with a GiB. Here the byte
// bound is lowered to 64 KiB and a viewer follows 100 subjects of 2 KiB,
// each interned through the ingest path.
func TestTheActorCacheIsBoundedInBytes(t *testing.T) {
	s := openViewerMode(t)
	const bound = 64 << 10
	s.writeMu.Lock()
	s.actorIDs.maxBytes = bound
	s.writeMu.Unlock()
	if _, err := s.RegisterViewer(context.Background(), did("alice"), "following", time.Unix(1_000, 0)); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		subject := fmt.Sprintf("%04d%s", i, strings.Repeat("a", 2000))
		n := int64(i + 1)
		if res := apply(t, s, follow("alice", subject, fmt.Sprint("f", i), n)); res.Applied != 1 {
			t.Fatalf("follow %d: %+v", i, res)
		}
	}
	entries, bytes := actorCacheBytes(s)
	if entries == 0 {
		t.Fatal("the actor cache is empty: the test does not reach it")
	}
	if bytes > bound {
		t.Fatalf("the actor cache holds %d DIDs in %d bytes, bound %d", entries, bytes, bound)
	}
}
