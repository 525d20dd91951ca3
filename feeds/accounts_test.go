package feeds

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// An inactive author stays out of feeds whichever path would bring its
// stored records in: a new follower's merge, a first read's build of a
// feed, a listing's re-merge. Only its coming back does.
func TestInactiveAuthorStaysOutOfFeeds(t *testing.T) {
	s := openViewerMode(t)
	ctx := context.Background()
	now := time.Unix(1_000, 0)
	register(t, s, "v1", "following")
	apply(t, s, follow("v1", "carol", "f1", 1), post("carol", "p1", 2))
	account := func(active bool, status string, n int64) {
		t.Helper()
		batch := &Batch{Cursor: StreamCursor{TimeUS: n}, Accounts: []AccountStatus{{DID: did("carol"), Active: active, Status: status, TimeUS: n}}}
		if _, err := s.ApplyBatch(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	account(false, "takendown", 3)
	want := func(viewer string, rkeys ...string) {
		t.Helper()
		if got := feedRKeys(t, s, "following", viewer, postNSID); !slices.Equal(got, rkeys) {
			t.Errorf("%s's feed = %v, want %v", viewer, got, rkeys)
		}
	}
	want("v1")

	// v2 follows carol live: the follow's merge.
	register(t, s, "v2", "following")
	apply(t, s, follow("v2", "carol", "f2", 4))
	want("v2")

	// v3's first read builds the feed from stored follows.
	register(t, s, "v3", "following")
	apply(t, s, follow("v3", "carol", "f3", 5))
	if ok, err := s.ClaimFirstRead(ctx, did("v3"), "following", "run", now, time.Minute); !ok || err != nil {
		t.Fatalf("claim v3's first read: %v %v", ok, err)
	}
	if _, err := s.CompleteFirstRead(ctx, did("v3"), "following", "run", now); err != nil {
		t.Fatal(err)
	}
	want("v3")

	// A listing of carol's records finishing re-merges them.
	if _, err := s.MergeAuthor(ctx, did("carol")); err != nil {
		t.Fatal(err)
	}
	want("v1")
	want("v2")

	account(true, "", 6)
	for _, v := range []string{"v1", "v2", "v3"} {
		want(v, "p1")
	}
}

// An account whose PDS answered "gone" is listed again once the stream
// says it is active: its listing is due at once with its attempts counted
// afresh, whether or not the store had seen it go.
func TestAnAccountBackFromGoneIsListedAgain(t *testing.T) {
	for _, sawItGo := range []bool{true, false} {
		t.Run(fmt.Sprintf("saw it go=%v", sawItGo), func(t *testing.T) {
			s := openViewerMode(t)
			ctx := context.Background()
			now := time.Unix(1_000, 0)
			register(t, s, "v1", "following")
			apply(t, s, follow("v1", "carol", "f1", 1))
			gone := Listing{Gone: true, Attempts: 6, LastError: "RepoDeactivated", NextRetry: now.Add(time.Hour)}
			if err := s.FailListing(ctx, did("carol"), postNSID, gone, now); err != nil {
				t.Fatal(err)
			}
			account := func(active bool, status string, n int64) {
				t.Helper()
				batch := &Batch{Cursor: StreamCursor{TimeUS: n}, Accounts: []AccountStatus{{DID: did("carol"), Active: active, Status: status, TimeUS: n}}}
				if _, err := s.ApplyBatch(ctx, batch); err != nil {
					t.Fatal(err)
				}
			}
			if sawItGo {
				account(false, "deactivated", 2)
			}
			account(true, "", 3)
			l, err := s.ReadListing(ctx, did("carol"), postNSID)
			if err != nil {
				t.Fatal(err)
			}
			if l.Gone || l.Attempts != 0 || l.LastError != "" {
				t.Errorf("listing %+v, want it open again with no attempts", l)
			}
			due, err := s.DueListings(ctx, now, 6, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(due) != 1 || due[0].Account != did("carol") {
				t.Errorf("due %v, want carol's listing", due)
			}
		})
	}
}

// A post of an inactive author reaches no feed, whatever the batch order:
// the fan-out runs at commit, after the batch's account events, so a post
// and its author's later deactivation in one batch are stored without a
// fan-out, and a post replayed after the author was deleted meets its
// tombstone. Coming back merges the stored ones.
func TestAnInactiveAuthorsPostsDoNotFanOut(t *testing.T) {
	s := openViewerMode(t)
	ctx := context.Background()
	register(t, s, "alice", "following")
	apply(t, s, follow("alice", "carol", "f1", 1), follow("alice", "dave", "f2", 2))
	batch := &Batch{
		Changes:  []Change{post("carol", "p1", 10), post("dave", "d1", 11)},
		Accounts: []AccountStatus{{DID: did("carol"), Active: false, Status: "deactivated", TimeUS: 20}, {DID: did("dave"), Active: false, Status: "deleted", TimeUS: 21}},
		Cursor:   StreamCursor{TimeUS: 21},
	}
	if _, err := s.ApplyBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if got := feedRKeys(t, s, "following", "alice", postNSID); len(got) != 0 {
		t.Errorf("alice's feed = %v with carol deactivated and dave deleted", got)
	}
	// The rewind replays dave's post after his deletion.
	apply(t, s, post("dave", "d1", 11))
	if got := feedRKeys(t, s, "following", "alice", postNSID); len(got) != 0 {
		t.Errorf("alice's feed = %v after a replay of a deleted account's post", got)
	}
	reactivate := &Batch{Accounts: []AccountStatus{{DID: did("carol"), Active: true, TimeUS: 30}}, Cursor: StreamCursor{TimeUS: 30}}
	if _, err := s.ApplyBatch(ctx, reactivate); err != nil {
		t.Fatal(err)
	}
	if got := feedRKeys(t, s, "following", "alice", postNSID); !slices.Equal(got, []string{"p1"}) {
		t.Errorf("alice's feed = %v once carol is back, want [p1]", got)
	}
}

// Account events carry no revision, and the reconnect rewind replays
// them: a replayed deactivation and reactivation must change nothing,
// where applying them again hid the author and merged back only its
// newest merge_limit posts.
func TestAReplayedAccountEventChangesNothing(t *testing.T) {
	feeds := []Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 2, Targets: []Target{{Collection: postNSID, Cap: 200}}}}
	s := mustOpenWith(t, Options{Path: t.TempDir() + "/appview.db", Feeds: feeds})
	ctx := context.Background()
	register(t, s, "alice", "following")
	apply(t, s, follow("alice", "carol", "f1", 1))
	stream := &Batch{
		Accounts: []AccountStatus{
			{DID: did("carol"), Active: false, Status: "deactivated", TimeUS: 10},
			{DID: did("carol"), Active: true, TimeUS: 11},
		},
		Cursor: StreamCursor{TimeUS: 11},
	}
	if _, err := s.ApplyBatch(ctx, stream); err != nil {
		t.Fatal(err)
	}
	posts := []Change{post("carol", "p1", 12), post("carol", "p2", 13), post("carol", "p3", 14), post("carol", "p4", 15)}
	apply(t, s, posts...)
	want := []string{"p4", "p3", "p2", "p1"}
	if got := feedRKeys(t, s, "following", "alice", postNSID); !slices.Equal(got, want) {
		t.Fatalf("alice's feed = %v, want %v", got, want)
	}
	replay := &Batch{Accounts: stream.Accounts, Changes: posts, Cursor: StreamCursor{TimeUS: 15}}
	if _, err := s.ApplyBatch(ctx, replay); err != nil {
		t.Fatal(err)
	}
	if got := feedRKeys(t, s, "following", "alice", postNSID); !slices.Equal(got, want) {
		t.Errorf("alice's feed after the replay = %v, want %v", got, want)
	}
}

// An account's deactivation in the same batch as the changes that make
// the store know it (a viewer's follow of it, its post): the batch ends as
// two batches would, the account inactive and its post in no feed. Before,
// the account events went first and skipped the account as unknown, so
// the deactivation was lost, depending on where a batch was cut (found by
// a review).
func TestADeactivationInTheBatchThatInternsTheAccountIsApplied(t *testing.T) {
	for _, split := range []bool{true, false} {
		s := openViewerMode(t)
		register(t, s, "v1", "following")
		changes := []Change{follow("v1", "carol", "f1", 1), post("carol", "p1", 2)}
		acct := []AccountStatus{{DID: did("carol"), Active: false, Status: "deactivated", TimeUS: 3}}
		batches := []*Batch{{Changes: changes, Accounts: acct, Cursor: StreamCursor{TimeUS: 3}}}
		if split {
			batches = []*Batch{{Changes: changes, Cursor: StreamCursor{TimeUS: 2}}, {Accounts: acct, Cursor: StreamCursor{TimeUS: 3}}}
		}
		for _, b := range batches {
			if _, err := s.ApplyBatch(context.Background(), b); err != nil {
				t.Fatal(err)
			}
		}
		got := feedRKeys(t, s, "following", "v1", postNSID)
		if active := count(t, s, `SELECT active FROM actors WHERE did = 'did:plc:carol'`); len(got) != 0 || active != 0 {
			t.Errorf("split %v: v1's feed %v, carol active %d; want no post and carol inactive", split, got, active)
		}
	}
}

// A deleted account's follows and records are deleted with tombstones as
// new as the deletion, so the reconnect rewind's replay of its creates
// from the seconds before stores nothing again. Its commits after the
// deletion (an account restored) are newer than the tombstones and are
// stored (found by a review: the replay stored the follow again).
func TestADeletedAccountsReplayedCreatesStayDeleted(t *testing.T) {
	s := openViewerMode(t)
	ctx := context.Background()
	register(t, s, "alice", "following")
	register(t, s, "dave", "following")
	before := []Change{follow("alice", "dave", "f1", 1), follow("dave", "bob", "df1", 2), post("dave", "d1", 3)}
	apply(t, s, before...)
	deletion := &Batch{Accounts: []AccountStatus{{DID: did("dave"), Active: false, Status: "deleted", TimeUS: 21}}, Cursor: StreamCursor{TimeUS: 21}}
	if _, err := s.ApplyBatch(ctx, deletion); err != nil {
		t.Fatal(err)
	}
	replay := &Batch{Changes: before[1:], Accounts: deletion.Accounts, Cursor: StreamCursor{TimeUS: 21}}
	if _, err := s.ApplyBatch(ctx, replay); err != nil {
		t.Fatal(err)
	}
	if n := count(t, s, `SELECT count(*) FROM follows f JOIN actors a ON a.id = f.actor_id WHERE a.did = 'did:plc:dave'`); n != 0 {
		t.Errorf("dave's follows after the replay: %d, want 0", n)
	}
	if n := count(t, s, `SELECT count(*) FROM records r JOIN actors a ON a.id = r.actor_id WHERE a.did = 'did:plc:dave'`); n != 0 {
		t.Errorf("dave's records after the replay: %d, want 0", n)
	}

	restored := &Batch{Accounts: []AccountStatus{{DID: did("dave"), Active: true, TimeUS: 30}}, Cursor: StreamCursor{TimeUS: 30}}
	if _, err := s.ApplyBatch(ctx, restored); err != nil {
		t.Fatal(err)
	}
	apply(t, s, post("dave", "d2", 31), follow("dave", "bob", "df2", 32))
	if got := feedRKeys(t, s, "following", "alice", postNSID); !slices.Equal(got, []string{"d2"}) {
		t.Errorf("alice's feed = %v after dave came back and posted, want [d2]", got)
	}
	if n := count(t, s, `SELECT count(*) FROM follows f JOIN actors a ON a.id = f.actor_id WHERE a.did = 'did:plc:dave'`); n != 1 {
		t.Errorf("dave's follows after he came back and followed: %d, want 1", n)
	}
}

// A deleted account restored and listed from its PDS later gets its
// records and follows back: the deletion's tombstones are marked as a
// listing's inferred ones are (unlistedSuffix), so a listing fetched
// after them may clear them, while the stream's replays stay covered.
// Before, they blocked every listing for the tombstone window (found by a
// review).
func TestARestoredAccountsListingIsStored(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	ctx := context.Background()
	t0 := reconcileAsOf.UnixMicro()
	// rev(n) is a TID at n µs, so the revs match the stream times.
	apply(t, s, follow("v1", "dave", "f1", t0), post("dave", "d1", t0+1), follow("dave", "bob", "df1", t0+2))

	del := time.Second.Microseconds()
	for _, a := range []AccountStatus{
		{DID: did("dave"), Active: false, Status: "deleted", TimeUS: t0 + del},
		{DID: did("dave"), Active: true, TimeUS: t0 + 2*del},
	} {
		if _, err := s.ApplyBatch(ctx, &Batch{Accounts: []AccountStatus{a}, Cursor: StreamCursor{TimeUS: a.TimeUS}}); err != nil {
			t.Fatal(err)
		}
	}

	// An hour later the restored repo is listed.
	asOf := reconcileAsOf.Add(time.Hour)
	res, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("dave"), Collection: postNSID,
		Records: listed("d1"), To: nextPage(t, s, did("dave"), postNSID), FetchedAt: asOf}, asOf)
	if err != nil {
		t.Fatal(err)
	}
	if res.Written != 1 {
		t.Errorf("listing of the restored account's post: %+v, want it written", res)
	}
	fres, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("dave"), Collection: followNSID,
		Records: []ListedRecord{{RKey: "df1", CID: "bafyfollow", Subject: did("bob"),
			Value: []byte(`{"$type":"app.bsky.graph.follow","subject":"did:plc:bob"}`)}},
		To: nextPage(t, s, did("dave"), followNSID), FetchedAt: asOf}, asOf)
	if err != nil {
		t.Fatal(err)
	}
	if fres.Written != 1 {
		t.Errorf("listing of the restored account's follow: %+v, want it written", fres)
	}
}

// A deleted account's creates from before the deletion in the same batch
// are not stored: account events are applied before the changes, so the
// deletion had nothing yet to bury, and the post and follow outlived the
// account (found by a review).
func TestCreatesBeforeADeletionInItsBatchStayDeleted(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	apply(t, s, follow("v1", "dave", "f1", 1))
	b := &Batch{Changes: []Change{post("dave", "d1", 2), follow("dave", "bob", "df1", 3)},
		Accounts: []AccountStatus{{DID: did("dave"), Status: "deleted", TimeUS: 4}},
		Cursor:   StreamCursor{TimeUS: 4}}
	if _, err := s.ApplyBatch(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if n := count(t, s, `SELECT (SELECT count(*) FROM records r JOIN actors a ON a.id = r.actor_id WHERE a.did = 'did:plc:dave')
		+ (SELECT count(*) FROM follows f JOIN actors a ON a.id = f.actor_id WHERE a.did = 'did:plc:dave')`); n != 0 {
		t.Errorf("deleted account's records and follows stored: %d, want 0", n)
	}
}

// Creates from before a deletion, skipped because they shared the
// deletion's batch, must stay deleted when the reconnect rewind replays
// them in a later batch, as they do when the deletion had its own batch.
func TestReplayedCreatesOfADeletionsOwnBatchStayDeleted(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	apply(t, s, follow("v1", "dave", "f1", 1))
	creates := []Change{post("dave", "d1", 2), follow("dave", "bob", "df1", 3)}
	b := &Batch{Changes: creates,
		Accounts: []AccountStatus{{DID: did("dave"), Status: "deleted", TimeUS: 4}},
		Cursor:   StreamCursor{TimeUS: 4}}
	if _, err := s.ApplyBatch(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	// The rewind replays the seconds before the cursor.
	apply(t, s, creates...)
	if n := count(t, s, `SELECT (SELECT count(*) FROM records r JOIN actors a ON a.id = r.actor_id WHERE a.did = 'did:plc:dave')
		+ (SELECT count(*) FROM follows f JOIN actors a ON a.id = f.actor_id WHERE a.did = 'did:plc:dave')`); n != 0 {
		t.Errorf("deleted account's replayed records and follows stored: %d, want 0", n)
	}
}

// A live follow of a deleted account wants its listing, but the listing
// is not due while the account stays deleted: a page of it is not stored,
// nor a failure (its PDS answers "Could not find repo"), so the retry loop
// would otherwise fetch it again at every pass. Restored, it is due again.
func TestADeletedAccountsListingIsNotDue(t *testing.T) {
	s := openViewerMode(t)
	ctx := context.Background()
	register(t, s, "v1", "following")
	register(t, s, "dave", "following") // known to the store, so its deletion applies
	if _, err := s.ApplyBatch(ctx, &Batch{Accounts: []AccountStatus{{DID: did("dave"), Status: "deleted", TimeUS: 2}},
		Cursor: StreamCursor{TimeUS: 2}}); err != nil {
		t.Fatal(err)
	}
	apply(t, s, follow("v1", "dave", "f1", 3))
	wanted, err := s.ReadListing(ctx, did("dave"), postNSID)
	if err != nil || wanted.NextRetry.IsZero() {
		t.Fatalf("setup: v1's follow did not want dave's listing: %+v, %v", wanted, err)
	}

	now := time.Unix(1<<33, 0)
	at := Listing{Host: "https://pds.test", Round: 1, Page: 1, Cursor: "d1", Fetched: 1}
	res, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("dave"), Collection: postNSID,
		Records: listed("d1"), To: at, FetchedAt: now}, now)
	if err != nil {
		t.Fatal(err)
	}
	failed := at
	failed.Attempts, failed.Gone, failed.LastError, failed.NextRetry = 1, true, "Could not find repo", now.Add(time.Minute)
	if err := s.FailListing(ctx, did("dave"), postNSID, failed, now); err != nil {
		t.Fatal(err)
	}
	l, err := s.ReadListing(ctx, did("dave"), postNSID)
	if err != nil {
		t.Fatal(err)
	}
	if !res.AccountDeleted || res.Written != 0 || l != wanted {
		t.Errorf("a page and a failure of deleted dave's listing: %+v, listing %+v; want nothing written, listing %+v", res, l, wanted)
	}
	if n := count(t, s, `SELECT count(*) FROM records`); n != 0 {
		t.Errorf("%d records of deleted dave stored", n)
	}
	due, err := s.DueListings(ctx, now, 10, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(due) != 0 {
		t.Errorf("due listings %v, want none while dave is deleted", due)
	}

	if _, err := s.ApplyBatch(ctx, &Batch{Accounts: []AccountStatus{{DID: did("dave"), Active: true, TimeUS: 4}},
		Cursor: StreamCursor{TimeUS: 4}}); err != nil {
		t.Fatal(err)
	}
	if due, err = s.DueListings(ctx, now, 10, 10); err != nil {
		t.Fatal(err)
	}
	if want := []ListingKey{{did("dave"), postNSID}}; !slices.Equal(due, want) {
		t.Errorf("due listings after dave was restored: %v, want %v", due, want)
	}
}
