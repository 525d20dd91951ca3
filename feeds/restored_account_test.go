package feeds

import (
	"context"
	"database/sql"
	"slices"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// A deleted account that comes back is rebuilt: its deletion removed its
// listings, its follows and its feeds, and no first read or live follow
// would ask for them again. Its target listings are due at once, so the
// retry loop lists its posts for the viewers who kept following it, and
// as a viewer its next read is a first read again, which lists its
// follows. (Left as found by the tenth session's review: its old posts
// never came back, and its own feed stayed empty.)
func TestARestoredAccountIsListedAndRebuilt(t *testing.T) {
	s := openViewerMode(t)
	ctx := context.Background()
	now := time.Unix(1<<33, 0)
	register(t, s, "v1", "following")
	register(t, s, "dave", "following")
	apply(t, s, follow("v1", "dave", "f1", 1), follow("dave", "bob", "df1", 2))
	for _, v := range []string{"v1", "dave"} {
		if ok, err := s.ClaimFirstRead(ctx, did(v), "following", "run", now, time.Minute); !ok || err != nil {
			t.Fatalf("claim %s's first read: %v %v", v, ok, err)
		}
		if _, err := s.CompleteFirstRead(ctx, did(v), "following", "run", now); err != nil {
			t.Fatal(err)
		}
	}
	// Dave's posts were listed: the listing is complete, nothing is due.
	at := Listing{Host: "https://pds.test", Round: 1, Page: 1, Complete: true, Fetched: 1}
	if _, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("dave"), Collection: postNSID,
		Records: listed("d1"), To: at, FetchedAt: now}, now); err != nil {
		t.Fatal(err)
	}
	daveDue := func() bool {
		t.Helper()
		keys, err := s.DueListings(ctx, now, 10, 10)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Contains(keys, ListingKey{did("dave"), postNSID})
	}
	if daveDue() {
		t.Fatal("setup: dave's complete listing is due")
	}

	for _, a := range []AccountStatus{
		{DID: did("dave"), Status: "deleted", TimeUS: 3},
		{DID: did("dave"), Active: true, TimeUS: 4},
	} {
		if _, err := s.ApplyBatch(ctx, &Batch{Accounts: []AccountStatus{a}, Cursor: StreamCursor{TimeUS: a.TimeUS}}); err != nil {
			t.Fatal(err)
		}
	}
	if !daveDue() {
		t.Error("dave's posts are not due for listing after he was restored")
	}
	if _, complete, err := s.StoredViewer(ctx, did("dave"), "following"); err != nil || complete {
		t.Errorf("restored dave as a viewer: complete %v (%v), want a first read again", complete, err)
	}
	if _, complete, err := s.StoredViewer(ctx, did("v1"), "following"); err != nil || !complete {
		t.Errorf("v1, who follows dave: complete %v (%v), want it left complete", complete, err)
	}

	// An account that was only deactivated keeps all of that: nothing to
	// list again, no first read.
	for _, a := range []AccountStatus{
		{DID: did("v1"), Status: "deactivated", TimeUS: 5},
		{DID: did("v1"), Active: true, TimeUS: 6},
	} {
		if _, err := s.ApplyBatch(ctx, &Batch{Accounts: []AccountStatus{a}, Cursor: StreamCursor{TimeUS: a.TimeUS}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, complete, err := s.StoredViewer(ctx, did("v1"), "following"); err != nil || !complete {
		t.Errorf("v1 after a deactivation and back: complete %v (%v), want it left complete", complete, err)
	}
}

// A deleted account restored within minutes of its deletion gets its
// records and follows back from its listings. The deletion's tombstones
// (buryAccount) outranked any listing fetched within 5 minutes of it (a
// listing speaks as of 5 minutes before its fetch), and the listing run
// at once after the reactivation found every record "existing" behind
// them and completed: the posts never came back (a review). The
// reactivation now clears the deletion's tombstones; a record the stream
// deleted before the account's deletion stays deleted.
func TestAnAccountRestoredSoonAfterItsDeletionIsListedAgain(t *testing.T) {
	s := openViewerMode(t)
	ctx := context.Background()
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) (int64, string) {
		us := t0.Add(d).UnixMicro()
		return us, syntax.NewTID(us, 0).String()
	}
	register(t, s, "v1", "following")
	f := follow("v1", "dave", "3lfollowaaaa2", 1)
	f.TimeUS, f.Rev = at(0)
	kept, gone, unposted := post("dave", "3lpostaaaaaa2", 2), post("dave", "3lpostbbbbbb2", 3), unpost("dave", "3lpostbbbbbb2", 4)
	kept.TimeUS, kept.Rev = at(time.Second)
	gone.TimeUS, gone.Rev = at(2 * time.Second)
	unposted.TimeUS, unposted.Rev = at(3 * time.Second)
	apply(t, s, f, kept, gone, unposted)
	for _, a := range []AccountStatus{
		{DID: did("dave"), Status: "deleted", TimeUS: t0.Add(10 * time.Second).UnixMicro()},
		{DID: did("dave"), Active: true, TimeUS: t0.Add(30 * time.Second).UnixMicro()},
	} {
		if _, err := s.ApplyBatch(ctx, &Batch{Accounts: []AccountStatus{a}, Cursor: StreamCursor{TimeUS: a.TimeUS}}); err != nil {
			t.Fatal(err)
		}
	}

	// Its PDS, a minute after the restore, lists both posts (the one the
	// stream deleted as a stale copy would).
	fetched := t0.Add(90 * time.Second)
	l, err := s.ReadListing(ctx, did("dave"), postNSID)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("dave"), Collection: postNSID,
		Records: listed("3lpostaaaaaa2", "3lpostbbbbbb2"),
		To:      Listing{Host: "https://pds.test", Round: l.Round, Page: 1, Complete: true, Fetched: 2, Deletions: l.Deletions}, FetchedAt: fetched}, fetched)
	if err != nil {
		t.Fatal(err)
	}
	if got := storedRKeys(t, s, "records"); !slices.Equal(got, []string{"3lpostaaaaaa2"}) {
		t.Fatalf("records %v after the listing (%+v), want the restored post alone: the one deleted on the stream stays deleted", got, res)
	}
}

// An account deleted before schema 0019 had deleted_us = 0, and its
// reactivation cleared none of the deletion's tombstones (left as found
// by the thirty-second session). Migration 0020 takes the deletion's time
// from its tombstones, so such an account restored after the upgrade gets
// its posts back from a listing like any other.
func TestAnAccountDeletedBeforeTheUpgradeIsListedAgainWhenRestored(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	ctx := context.Background()
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	s, err := Open(ctx, Options{Path: path, Feeds: defaultFeeds})
	if err != nil {
		t.Fatal(err)
	}
	register(t, s, "v1", "following")
	f, p := follow("v1", "dave", "3lfollowaaaa2", 1), post("dave", "3lpostaaaaaa2", 2)
	f.TimeUS, f.Rev = t0.UnixMicro(), syntax.NewTID(t0.UnixMicro(), 0).String()
	p.TimeUS, p.Rev = t0.Add(time.Second).UnixMicro(), syntax.NewTID(t0.Add(time.Second).UnixMicro(), 0).String()
	apply(t, s, f, p)
	deleted := t0.Add(10 * time.Second).UnixMicro()
	if _, err := s.ApplyBatch(ctx, &Batch{Accounts: []AccountStatus{{DID: did("dave"), Status: "deleted", TimeUS: deleted}},
		Cursor: StreamCursor{TimeUS: deleted}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// As a build before 0019 left it: the column unset, the version 19.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`UPDATE actors SET deleted_us = 0`, `PRAGMA user_version = 19`} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s = mustOpenWith(t, Options{Path: path, Feeds: defaultFeeds})
	restored := t0.Add(30 * time.Second).UnixMicro()
	if _, err := s.ApplyBatch(ctx, &Batch{Accounts: []AccountStatus{{DID: did("dave"), Active: true, TimeUS: restored}},
		Cursor: StreamCursor{TimeUS: restored}}); err != nil {
		t.Fatal(err)
	}
	fetched := t0.Add(90 * time.Second)
	l, err := s.ReadListing(ctx, did("dave"), postNSID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("dave"), Collection: postNSID,
		Records: listed("3lpostaaaaaa2"),
		To:      Listing{Host: "https://pds.test", Round: l.Round, Page: 1, Complete: true, Fetched: 1, Deletions: l.Deletions}, FetchedAt: fetched}, fetched); err != nil {
		t.Fatal(err)
	}
	if got := storedRKeys(t, s, "records"); !slices.Equal(got, []string{"3lpostaaaaaa2"}) {
		t.Fatalf("records %v after the restored account's listing, want its post back", got)
	}
}
