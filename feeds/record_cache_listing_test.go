package feeds

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// A listing that finds a stored record refreshes its indexed time
// (listings.go listRecord), which getFeed shows as time_us. The record
// cache kept serving the time it held before, where a page without the
// cache showed the stored one (found by a review of the read path).
func TestTheRecordCacheForgetsARecordAListingRefreshed(t *testing.T) {
	for _, cacheMB := range []int{0, 4} {
		t.Run(fmt.Sprintf("cacheMB=%d", cacheMB), func(t *testing.T) {
			s := mustOpenWith(t, Options{Path: t.TempDir() + "/appview.db", Feeds: defaultFeeds, IndexAll: true, RecordCacheMB: cacheMB})
			apply(t, s, follow("alice", "carol", "f1", 1), post("carol", "p1", 10))
			apply(t, s, post("dave", "x", 5000)) // the stream cursor moves on to 5000
			if items := firstPage(t, s, "alice"); len(items) != 1 || items[0].TimeUS != 10 {
				t.Fatalf("first page %+v, want p1 at 10 (now cached)", items)
			}
			if _, err := s.ApplyListingPage(context.Background(), &ListingPage{Account: did("carol"), Collection: postNSID,
				Records: listed("p1"), To: nextPage(t, s, did("carol"), postNSID)}, time.Now()); err != nil {
				t.Fatal(err)
			}
			stored := count(t, s, `SELECT indexed_us FROM records WHERE rkey = 'p1'`)
			items := firstPage(t, s, "alice")
			if len(items) != 1 {
				t.Fatalf("page %+v", items)
			}
			if items[0].TimeUS != int64(stored) {
				t.Errorf("page shows p1 with time_us %d, the database holds %d: served from the cache after the record changed",
					items[0].TimeUS, stored)
			}
		})
	}
}
