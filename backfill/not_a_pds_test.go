package backfill

import (
	"context"
	"testing"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/pds/pdstest"
)

// A followee whose PDS endpoint answers 404 MethodNotImplemented (a host
// that is not a PDS, or lacks listRecords) has its listing failed and
// counted, to be retried: never complete, as if its repo had nothing.
func TestAFolloweeOnAHostWithoutListRecordsIsNotListedEmpty(t *testing.T) {
	notPDS := pdstest.NewNotAPDS()
	t.Cleanup(notPDS.Close)
	w := newWorld(t, Config{})
	ctx := context.Background()
	viewer, alice := w.account("viewer"), did("alice")
	w.plc.Add(alice, syntax.Handle("alice.test"), notPDS.URL)
	w.follow(viewer, alice, 1)

	if err := w.svc.Ensure(ctx, viewer, "following", "viewer-client"); err != nil {
		t.Fatal(err)
	}
	l, err := w.store.ReadListing(ctx, alice, postNSID)
	if err != nil {
		t.Fatal(err)
	}
	if l.Complete || l.Gone || l.Attempts != 1 || l.NextRetry.IsZero() {
		t.Fatalf("alice's listing = %+v, want failed once and due again, not complete", l)
	}
}
