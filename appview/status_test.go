package appview

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/internal/testclock"
	"github.com/atfeeds/appview/jetstream/jetstreamtest"
)

func TestStatusPage(t *testing.T) {
	n := newNetwork(t)
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	alice, carol := n.account("alice"), n.account("carol")
	n.pdsFollow(alice, carol, "3kfollowcarol")
	n.pdsPost(carol, rkeyAt(base), base)
	td := startDaemon(t, n.js, n.config(t))
	td.feed(t, alice) // the first read: two listings, two sync runs
	now := time.Now().UnixMicro()
	n.js.Append(jetstreamtest.Post(carol, rkeyAt(time.Now()), now, "live"))
	td.waitCursor(t, now)

	var st statusReport
	td.getJSON(t, "/status", &st)
	if st.Version != Version || st.Jetstream.TimeUS != now || st.Jetstream.Host == "" ||
		st.Jetstream.LagSeconds == nil || *st.Jetstream.LagSeconds < 0 || *st.Jetstream.LagSeconds > 60 {
		t.Errorf("jetstream = %+v", st.Jetstream)
	}
	if len(st.SyncRuns) != 2 || st.SyncRuns[0].Outcome != "ok" {
		t.Errorf("sync runs = %+v", st.SyncRuns)
	}
	if st.LastGap != nil {
		t.Errorf("gap = %+v", st.LastGap)
	}
	// The first request waits for the first count.
	if st.CountsAsOf == nil || st.Follows == nil || *st.Follows != 1 || st.Targets == nil || *st.Targets != 2 {
		t.Fatalf("counts: as of %v, follows %v, targets %v", st.CountsAsOf, st.Follows, st.Targets)
	}
	if len(st.Feeds) != 1 || st.Feeds[0].Name != "following" || st.Feeds[0].Viewers != 1 || st.Feeds[0].Items != 2 ||
		len(st.Feeds[0].Collections) != 1 || st.Feeds[0].Collections[0] != (collectionStatus{Collection: postNSID, Items: 2}) {
		t.Errorf("feeds = %+v", st.Feeds)
	}
	if st.Backfill == nil || st.Backfill.Listings["complete"] != 2 || len(st.Backfill.Failures) != 0 {
		t.Errorf("backfill = %+v", st.Backfill)
	}
	if st.Sweep == nil {
		t.Error("no sweep section")
	}
}

// The counts come from a snapshot: requests within statusCountsEvery get
// the same one, a later request gets the old one and causes a recount.
func TestStatusCountsAreCached(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Database.Path = t.TempDir() + "/appview.db"
	cfg.Ingest.IndexAll = true
	ctx := context.Background()
	store, _, err := OpenOrCreateStore(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	clock := testclock.New(time.Unix(1_800_000_000, 0))
	p := newStatusPage(store, "test", testLogger(t), clock.Now)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()

	status := func() statusReport {
		t.Helper()
		v, err := p.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Through JSON, as a client sees it.
		b, _ := json.Marshal(v)
		var r statusReport
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	follow := func(rkey string) {
		t.Helper()
		_, err := store.ApplyBatch(ctx, &feeds.Batch{Changes: []feeds.Change{{
			DID: "did:plc:alice", Collection: followNSID, RKey: syntax.RecordKey(rkey), Op: feeds.OpCreate,
			Rev: jetstreamtest.Rev(1), CID: "bafyfollow", Subject: "did:plc:carol", TimeUS: 1,
			Record: json.RawMessage(`{"$type":"app.bsky.graph.follow","subject":"did:plc:carol"}`),
		}}})
		if err != nil {
			t.Fatal(err)
		}
	}

	first := status()
	if first.CountsAsOf == nil || !first.CountsAsOf.Equal(clock.Now()) || *first.Follows != 0 {
		t.Fatalf("first: as of %v, follows %v", first.CountsAsOf, first.Follows)
	}
	follow("f1")
	clock.Advance(statusCountsEvery / 2)
	if r := status(); !r.CountsAsOf.Equal(*first.CountsAsOf) || *r.Follows != 0 {
		t.Fatalf("within the interval: as of %v, follows %d; want the cached snapshot", r.CountsAsOf, *r.Follows)
	}
	clock.Advance(statusCountsEvery / 2)
	if r := status(); !r.CountsAsOf.Equal(*first.CountsAsOf) {
		t.Fatalf("a due request is answered from the old snapshot, got one as of %v", r.CountsAsOf)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := status()
		if r.CountsAsOf.Equal(clock.Now()) {
			if *r.Follows != 1 {
				t.Fatalf("recount: follows %d, want 1", *r.Follows)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no recount after the interval")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The README's example of /status decodes into the report with no field
// left over, so the documentation cannot drift from the page.
func TestStatusReadmeExample(t *testing.T) {
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(data), "### /status")
	_, block, ok2 := strings.Cut(after, "```json\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("README has no /status example")
	}
	dec := json.NewDecoder(strings.NewReader(block))
	dec.DisallowUnknownFields()
	var r statusReport
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("README /status example: %v", err)
	}
	if r.CountsAsOf == nil || len(r.Feeds) == 0 || r.Backfill == nil || r.Sweep == nil || len(r.SyncRuns) == 0 {
		t.Errorf("README example lacks sections: %+v", r)
	}
}
