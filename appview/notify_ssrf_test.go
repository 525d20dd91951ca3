package appview

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/atfeeds/appview/directory"
	"github.com/atfeeds/appview/egress"
	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/pds"
	"github.com/atfeeds/appview/xrpc"
)

// fixedPDS resolves every DID to one PDS endpoint.
type fixedPDS string

func (p fixedPDS) LookupDID(_ context.Context, did syntax.DID) (*directory.Identity, error) {
	return &directory.Identity{DID: did, PDS: string(p)}, nil
}

// TestNotifyOfARecordOnAForbiddenPDSIsAccountNotFound: a PDS whose name
// passes the document check but resolves to a private address is refused
// by the egress dialer at connect time (pds.KindForbidden). Like a
// document naming a forbidden PDS outright (AccountNotFound), asking again
// cannot help; it was answered UpstreamFailure, which tells the app to
// retry (a review). The resolver here hands out the loopback PDS as a
// name resolving to loopback would, whatever this machine's names are.
func TestNotifyOfARecordOnAForbiddenPDSIsAccountNotFound(t *testing.T) {
	w := newSSRFWorld(t, false)
	ctx := context.Background()
	alice, carol := syntax.DID("did:plc:alice"), syntax.DID("did:plc:carol")
	if _, err := w.store.RegisterViewer(ctx, alice, "following", time.Now()); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMicro()
	follow := feeds.Change{DID: alice, Collection: followNSID, RKey: "3kfollowcarol", Op: feeds.OpCreate,
		Rev: syntax.NewTID(now, 0).String(), CID: "bafyfollow", Subject: carol, TimeUS: now,
		Record: json.RawMessage(`{"$type":"app.bsky.graph.follow","subject":"did:plc:carol","createdAt":"2026-01-01T00:00:00Z"}`)}
	if _, err := w.store.ApplyBatch(ctx, &feeds.Batch{Changes: []feeds.Change{follow}, Cursor: feeds.StreamCursor{TimeUS: now}}); err != nil {
		t.Fatal(err)
	}
	w.pds.AddRecord(carol, postNSID, "3kcarolpost22", `{"$type":"app.bsky.feed.post","text":"hi","createdAt":"2026-01-01T00:00:00Z"}`)

	n := &notifier{
		store:    w.store,
		resolver: fixedPDS(w.pds.URL()),
		pds:      pds.NewClient(egress.NewClient(egress.Options{Timeout: 5 * time.Second}), pds.Options{Timeout: 5 * time.Second}),
		limits:   pds.NewLimiter(notifyGlobal, notifyPerHost),
		paused:   pds.NewHostPauses(),
		follows:  map[syntax.NSID]bool{followNSID: true},
		log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		now:      time.Now,
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "outcomes"}, []string{"outcome"}),
	}
	uri := "at://" + string(carol) + "/" + string(postNSID) + "/3kcarolpost22"
	res, err := n.NotifyOfUpdate(ctx, []syntax.ATURI{syntax.ATURI(uri)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Errors) != 1 || res.Errors[0].Error != xrpc.NotifyErrAccountNotFound {
		t.Errorf("result %+v, want %s for the forbidden PDS", res, xrpc.NotifyErrAccountNotFound)
	}
	if got := w.pds.TotalRequests(); got != 0 {
		t.Errorf("the loopback PDS was reached %d times", got)
	}
}
