package feeds

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"unsafe"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// A viewer's actor id is read once: later pages seek feed_items by it
// without the actors index (shown by taking the DID off the row behind
// the store's back), and an actor not yet stored is not remembered as
// absent.
func TestPagesRememberTheViewersActorID(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	if items := firstPage(t, s, "alice"); len(items) != 0 {
		t.Fatalf("unknown viewer's page: %+v", items)
	}
	apply(t, s, follow("alice", "carol", "f1", 1), post("carol", "p1", 10))
	if items := firstPage(t, s, "alice"); len(items) != 1 {
		t.Fatalf("page once alice is stored: %d items, want 1 (an unknown actor must not be remembered)", len(items))
	}
	if _, err := s.writer.Exec(`UPDATE actors SET did = 'did:plc:renamed' WHERE did = ?`, string(did("alice"))); err != nil {
		t.Fatal(err)
	}
	if items := firstPage(t, s, "alice"); len(items) != 1 || items[0].RKey != "p1" {
		t.Fatalf("page after the first: %+v, want p1 read by the remembered id", items)
	}
}

// The DID a page is read for is usually a slice of the request's query
// string (url.ParseQuery leaves an unescaped value where it is), which
// the server lets grow to 256 KB. Remembered as it came, each id would
// keep its whole request alive, up to 200,000 of them; it keeps a copy
// of the DID alone.
func TestARememberedViewerIDKeepsNoneOfTheRequest(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	apply(t, s, follow("alice", "carol", "f1", 1), post("carol", "p1", 10))
	raw := "feed=following&actor=" + string(did("alice")) + "&pad=" + strings.Repeat("x", 256<<10)
	q, err := url.ParseQuery(raw)
	if err != nil {
		t.Fatal(err)
	}
	viewer, err := syntax.ParseDID(q.Get("actor"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.ReadFeed(context.Background(), PageQuery{Feed: "following", Viewer: viewer, Collection: postNSID, Limit: 50})
	if err != nil || len(p.Items) != 1 {
		t.Fatalf("page: %+v, %v", p, err)
	}
	start := uintptr(unsafe.Pointer(unsafe.StringData(raw)))
	for k := range s.viewerIDs.ids.ids {
		if at := uintptr(unsafe.Pointer(unsafe.StringData(string(k)))); at >= start && at < start+uintptr(len(raw)) {
			t.Fatalf("remembered DID %s points into the %d-byte query string it was read from", k, len(raw))
		}
	}
}
