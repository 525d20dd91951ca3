package feeds

import "testing"

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
