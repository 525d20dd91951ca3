package feeds

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// viewerIDBytes sums the DIDs the remembered viewer ids hold, with each
// entry's overhead.
func viewerIDBytes(s *Store) (entries, bytes int) {
	s.viewerIDs.mu.RLock()
	defer s.viewerIDs.mu.RUnlock()
	for d := range s.viewerIDs.ids.ids {
		bytes += len(d) + didEntryOverhead
	}
	return len(s.viewerIDs.ids.ids), bytes
}

// The viewer ids a Store remembers were bounded at 200,000 entries, but a
// viewer's DID is the client's, up to 2 KiB: in index_all mode pages for
// 200,000 accounts of such DIDs (any follow's subject is one) held
// 400 MiB. Here the byte bound is lowered to 64 KiB and pages are read
// for 100 accounts of 2 KiB DIDs.
func TestViewerIDsAreBoundedInBytes(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	const bound = 64 << 10
	s.viewerIDs.mu.Lock()
	s.viewerIDs.ids.maxBytes = bound
	s.viewerIDs.mu.Unlock()
	var subjects []string
	var changes []Change
	for i := range 100 {
		subjects = append(subjects, fmt.Sprintf("%04d%s", i, strings.Repeat("a", 2000)))
		changes = append(changes, follow("alice", subjects[i], fmt.Sprint("f", i), int64(i+1)))
	}
	apply(t, s, changes...)
	for _, subject := range subjects {
		if _, err := s.ReadFeed(context.Background(), PageQuery{Feed: "following", Viewer: did(subject), Collection: postNSID, Limit: 50}); err != nil {
			t.Fatal(err)
		}
	}
	entries, bytes := viewerIDBytes(s)
	if entries == 0 {
		t.Fatal("no viewer id remembered: the test does not reach them")
	}
	if bytes > bound {
		t.Fatalf("%d viewer ids remembered in %d bytes, bound %d", entries, bytes, bound)
	}
}
