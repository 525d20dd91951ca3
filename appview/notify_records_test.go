package appview

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/xrpc"
)

// TestNotifiedPostDatedBeforeTheEpochSinks: the stream and the listing
// clamp a createdAt at or before the epoch to 1µs so that it sinks
// (TestPostDatedAtTheEpoch). notifyOfUpdate must read the same record the
// same way.
func TestNotifiedPostDatedBeforeTheEpochSinks(t *testing.T) {
	n := newNetwork(t)
	alice, carol := n.account("alice"), n.account("carol")
	n.pdsFollow(alice, carol, "3kfollowcarol")
	old := time.Now().Add(-time.Hour)
	honest := rkeyAt(old)
	n.pdsPost(carol, honest, old)
	cfg := n.config(t)
	cfg.Notify = NotifyConfig{Enabled: true, Secret: testNotifySecret}
	td := startDaemon(t, n.js, cfg)
	if got := td.feed(t, alice); !slices.Equal(got, []string{honest}) {
		t.Fatalf("first read = %v", got)
	}

	backdated := rkeyAt(time.Now())
	n.pds.AddRecord(syntax.DID(carol), postNSID, syntax.RecordKey(backdated),
		`{"$type":"app.bsky.feed.post","text":"moon landing","createdAt":"1969-07-20T20:17:40Z"}`)
	res := td.notify(t, postURI(carol, backdated))
	if !slices.Equal(res.Indexed, []string{postURI(carol, backdated)}) {
		t.Fatalf("notify: %+v", res)
	}
	// Newest first: the post dated 1969 must sink below the hour-old one.
	if got := td.feed(t, alice); !slices.Equal(got, []string{honest, backdated}) {
		t.Errorf("feed = %v, want %v: a notified post dated before 1970 did not sink", got, []string{honest, backdated})
	}
}

// TestNotifiedFollowSubjectIsReadWithExactKeys: the stream decoder reads a
// follow's subject under the exact key "subject" (a record with only
// "Subject" is dropped as bad_subject). notifyOfUpdate decoded it with
// encoding/json's case-insensitive field matching, so it stored a record
// the stream refuses as a follow (found by a review); it reads records
// as the stream does now (feeds.ParseRecordHead).
func TestNotifiedFollowSubjectIsReadWithExactKeys(t *testing.T) {
	n := newNetwork(t)
	alice, carol, dave := n.account("alice"), n.account("carol"), n.account("dave")
	n.pdsFollow(alice, carol, "3kfollowcarol")
	davePost := rkeyAt(time.Now().Add(-time.Minute))
	n.pdsPost(dave, davePost, time.Now().Add(-time.Minute))
	cfg := n.config(t)
	cfg.Notify = NotifyConfig{Enabled: true, Secret: testNotifySecret}
	td := startDaemon(t, n.js, cfg)
	if got := td.feed(t, alice); len(got) != 0 {
		t.Fatalf("first read = %v", got)
	}

	// Only "Subject": not a follow record the stream would keep.
	rk := rkeyAt(time.Now())
	n.pds.AddRecord(syntax.DID(alice), followNSID, syntax.RecordKey(rk),
		fmt.Sprintf(`{"$type":"app.bsky.graph.follow","Subject":%q,"createdAt":"2026-01-01T00:00:00Z"}`, dave))
	uri := "at://" + alice + "/" + followNSID + "/" + rk
	res := td.notify(t, uri)
	if got := errorNames(res)[uri]; got != xrpc.NotifyErrInvalidRecord {
		t.Errorf("follow with only a \"Subject\" key: %+v, want %s", res, xrpc.NotifyErrInvalidRecord)
	}
	followees, err := td.Store().Followees(context.Background(), syntax.DID(alice), followNSID)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(followees, syntax.DID(dave)) {
		t.Errorf("alice follows %v: a record without a \"subject\" was stored as a follow of dave", followees)
	}
}
