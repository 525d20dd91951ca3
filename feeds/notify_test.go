package feeds

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

var notifyClock = time.UnixMicro(1_800_000_000_000_000)

// fetched is a record as a PDS would return it; nil text means absent.
func fetched(author, rkey string, text *string) Notified {
	n := Notified{RecordKey: RecordKey{DID: did(author), Collection: postNSID, RKey: syntax.RecordKey(rkey)}}
	if text != nil {
		n.Present = true
		n.CID = "bafynotified" + *text
		n.Record = json.RawMessage(fmt.Sprintf(`{"$type":"app.bsky.feed.post","text":%q}`, *text))
	}
	return n
}

func str(s string) *string { return &s }

// lookup reads the stored state as the notifier does before a fetch; the
// clock advances a second per call.
func lookup(t *testing.T, s *Store, n *Notified) {
	t.Helper()
	notifyClock = notifyClock.Add(time.Second)
	st, err := s.LookupRecord(context.Background(), n.RecordKey, notifyClock)
	if err != nil {
		t.Fatal(err)
	}
	n.Before = st
}

func applyNotified(t *testing.T, s *Store, ns ...Notified) ([]NotifyOutcome, BatchResult) {
	t.Helper()
	res, br, err := s.ApplyNotified(context.Background(), ns)
	if err != nil {
		t.Fatal(err)
	}
	var out []NotifyOutcome
	for _, r := range res {
		out = append(out, r.Outcome)
	}
	return out, br
}

func notify(t *testing.T, s *Store, n Notified) NotifyOutcome {
	t.Helper()
	lookup(t, s, &n)
	out, _ := applyNotified(t, s, n)
	return out[0]
}

func body(t *testing.T, s *Store, author, rkey string) string {
	t.Helper()
	var b string
	err := s.reader.QueryRow(`SELECT r.body FROM records r JOIN actors a ON a.id = r.actor_id
		WHERE a.did = ? AND r.rkey = ?`, string(did(author)), rkey).Scan(&b)
	if err != nil {
		return ""
	}
	var v struct{ Text string }
	json.Unmarshal([]byte(b), &v)
	return v.Text
}

func TestNotifyCreateUpdateDelete(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	apply(t, s, follow("alice", "carol", "f1", 1))

	if got := notify(t, s, fetched("carol", "p1", str("one"))); got != NotifyWritten {
		t.Fatalf("create: %s", got)
	}
	if got := feedRKeys(t, s, "following", "alice", postNSID); !slices.Equal(got, []string{"p1"}) {
		t.Fatalf("feed after notified create = %v", got)
	}
	if got := notify(t, s, fetched("carol", "p1", str("one"))); got != NotifyUnchanged {
		t.Fatalf("same cid: %s", got)
	}
	// Two edits notified one after the other both land.
	for _, text := range []string{"two", "three"} {
		if got := notify(t, s, fetched("carol", "p1", str(text))); got != NotifyWritten {
			t.Fatalf("update to %s: %s", text, got)
		}
		if b := body(t, s, "carol", "p1"); b != text {
			t.Fatalf("body = %q, want %q", b, text)
		}
	}
	// Jetstream then delivers the create: an update in place, no second
	// fan-out, and the stream's version wins.
	c := post("carol", "p1", 5)
	if res := apply(t, s, c); res.Applied != 1 || res.FanoutRows != 0 {
		t.Fatalf("stream create after notify: %+v", res)
	}
	if b := body(t, s, "carol", "p1"); b != "p1" {
		t.Fatalf("body after stream = %q", b)
	}
	// Its replay is a duplicate.
	if res := apply(t, s, c); res.Duplicates != 1 {
		t.Fatalf("replay: %+v", res)
	}

	if got := notify(t, s, fetched("carol", "p1", nil)); got != NotifyDeleted {
		t.Fatalf("delete: %s", got)
	}
	if got := feedRKeys(t, s, "following", "alice", postNSID); len(got) != 0 {
		t.Fatalf("feed after notified delete = %v", got)
	}
	// A replay of the create the store had seen cannot resurrect it; the
	// stream's own delete still applies.
	if res := apply(t, s, c); res.Duplicates != 1 {
		t.Fatalf("replayed create after notified delete: %+v", res)
	}
	if res := apply(t, s, unpost("carol", "p1", 6)); res.Applied != 1 {
		t.Fatalf("stream delete after notified delete: %+v", res)
	}
	if got := notify(t, s, fetched("carol", "p1", nil)); got != NotifyAbsent {
		t.Fatalf("delete of nothing: %s", got)
	}
}

func TestNotifyNeverOverridesNewerStream(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	apply(t, s, follow("alice", "carol", "f1", 1), post("carol", "p1", 2))

	// The record is read, then the stream deletes it while the PDS is
	// asked, and the PDS answered with the version from before the delete.
	n := fetched("carol", "p1", str("stale"))
	lookup(t, s, &n)
	apply(t, s, unpost("carol", "p1", 3))
	if out, _ := applyNotified(t, s, n); out[0] != NotifySuperseded {
		t.Fatalf("stale fetch after stream delete: %s", out[0])
	}
	if got := feedRKeys(t, s, "following", "alice", postNSID); len(got) != 0 {
		t.Fatalf("stale fetch resurrected the post: %v", got)
	}

	// Same for an update: the stream's newer body stays.
	apply(t, s, post("carol", "p2", 4))
	n = fetched("carol", "p2", str("stale"))
	lookup(t, s, &n)
	upd := post("carol", "p2", 5)
	upd.Op, upd.CID = OpUpdate, "bafynewer"
	upd.Record = json.RawMessage(`{"$type":"app.bsky.feed.post","text":"newer"}`)
	apply(t, s, upd)
	if out, _ := applyNotified(t, s, n); out[0] != NotifySuperseded {
		t.Fatalf("stale fetch after stream update: %s", out[0])
	}
	if b := body(t, s, "carol", "p2"); b != "newer" {
		t.Fatalf("body = %q, want the stream's", b)
	}

	// A notified delete of a record the stream re-wrote meanwhile.
	n = fetched("carol", "p2", nil)
	lookup(t, s, &n)
	upd2 := upd
	upd2.Rev, upd2.CID = rev(6), "bafynewest"
	apply(t, s, upd2)
	if out, _ := applyNotified(t, s, n); out[0] != NotifySuperseded {
		t.Fatalf("stale delete after stream update: %s", out[0])
	}
	if got := feedRKeys(t, s, "following", "alice", postNSID); !slices.Equal(got, []string{"p2"}) {
		t.Fatalf("feed = %v", got)
	}
}

func TestNotifyFollowAndScope(t *testing.T) {
	s := mustOpenWith(t, Options{Path: t.TempDir() + "/appview.db", Feeds: defaultFeeds})
	ctx := context.Background()
	if _, err := s.RegisterViewer(ctx, did("alice"), "following", notifyClock); err != nil {
		t.Fatal(err)
	}
	// Nobody follows carol yet: her post is out of scope.
	n := fetched("carol", "p1", str("one"))
	lookup(t, s, &n)
	if n.Before.InScope {
		t.Fatal("carol in scope before anyone follows her")
	}
	if out, _ := applyNotified(t, s, n); out[0] != NotifyOutOfScope {
		t.Fatalf("post of an unfollowed account: %s", out[0])
	}

	// Alice's follow of carol, notified: stored, reported as a new follow.
	f := Notified{
		RecordKey: RecordKey{DID: did("alice"), Collection: followNSID, RKey: "f1"},
		Present:   true, CID: "bafyfollow", Subject: did("carol"),
		Record: json.RawMessage(fmt.Sprintf(`{"$type":"app.bsky.graph.follow","subject":%q}`, did("carol"))),
	}
	lookup(t, s, &f)
	if !f.Before.InScope {
		t.Fatal("a viewer's follow is out of scope")
	}
	out, br := applyNotified(t, s, f)
	if out[0] != NotifyWritten || len(br.NewFollows) != 1 || br.NewFollows[0].Subject != did("carol") {
		t.Fatalf("notified follow: %v %+v", out, br)
	}
	if got := notify(t, s, f); got != NotifyUnchanged {
		t.Fatalf("same follow again: %s", got)
	}
	if got := notify(t, s, fetched("carol", "p1", str("one"))); got != NotifyWritten {
		t.Fatalf("post of a followed account: %s", got)
	}
	if got := feedRKeys(t, s, "following", "alice", postNSID); !slices.Equal(got, []string{"p1"}) {
		t.Fatalf("feed = %v", got)
	}
	// The unfollow, notified, takes carol's post out of alice's feed.
	f.Present = false
	if got := notify(t, s, f); got != NotifyDeleted {
		t.Fatalf("notified unfollow: %s", got)
	}
	if got := feedRKeys(t, s, "following", "alice", postNSID); len(got) != 0 {
		t.Fatalf("feed after unfollow = %v", got)
	}
}

func TestNotifiedRev(t *testing.T) {
	at := time.UnixMicro(1_800_000_000_000_000)
	tid := rev(100)
	for _, tc := range []struct {
		before StoredRecord
		want   string
	}{
		{StoredRecord{ReadAt: at}, ".01800000000000000"},
		{StoredRecord{Rev: tid, ReadAt: at}, tid + ".01800000000000000"},
		{StoredRecord{Rev: tid + ".01700000000000000", ReadAt: at}, tid + ".01800000000000000"},
		// An earlier notification stamped later (the clock stepped back).
		{StoredRecord{Rev: tid + ".01900000000000000", ReadAt: at}, tid + ".01900000000000001"},
	} {
		got := notifiedRev(tc.before)
		if got != tc.want {
			t.Errorf("notifiedRev(%+v) = %q, want %q", tc.before, got, tc.want)
		}
		if !(got > tc.before.Rev || tc.before.Rev == "") || got >= rev(101) || (tc.before.Rev != "" && got <= tid) {
			t.Errorf("%q is not between %q and the next rev", got, tc.before.Rev)
		}
	}
}
