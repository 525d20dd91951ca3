package feeds

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestResetJetstreamIsAdoptedNotOverwritten(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	daemon := mustOpenAt(t, path, defaultFeeds)
	ctx := context.Background()
	if _, err := daemon.ApplyBatch(ctx, &Batch{Cursor: StreamCursor{TimeUS: 100, Seq: 9, Host: "wss://a"}}); err != nil {
		t.Fatal(err)
	}
	// The operator's command opens the same file while the daemon runs.
	tool := mustOpenAt(t, path, defaultFeeds)
	e, err := tool.ResetJetstream(ctx, time.UnixMicro(50), "ops", time.Unix(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	if e.Old != "time_us=100 seq=9 host=wss://a generation=0" || e.New != "time_us=50 generation=1" {
		t.Errorf("audit entry %+v", e)
	}
	// The daemon's next commit carries an older generation: refused, and
	// the daemon adopts the reset position instead.
	res, err := daemon.ApplyBatch(ctx, &Batch{Changes: []Change{post("carol", "p1", 200)}, Cursor: StreamCursor{TimeUS: 200}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.CursorReset || daemon.Cursor().TimeUS != 50 {
		t.Fatalf("reset not adopted: %+v, cursor %+v", res, daemon.Cursor())
	}
	// From there it moves forward again under the new generation.
	if _, err := daemon.ApplyBatch(ctx, &Batch{Cursor: StreamCursor{TimeUS: 60}}); err != nil {
		t.Fatal(err)
	}
	cur, gen, _ := readCursor(ctx, daemon.reader)
	if cur.TimeUS != 60 || gen != 1 {
		t.Errorf("stored cursor %+v generation %d, want 60 at generation 1", cur, gen)
	}
	entries, _ := tool.Audit(ctx, 10)
	if len(entries) != 1 || entries[0].User != "ops" || entries[0].Action != "reset jetstream" {
		t.Errorf("audit = %+v", entries)
	}
}

func TestResetOfNothingRecordsNothing(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	ctx := context.Background()
	now := time.Unix(1, 0)
	if _, err := s.ResetJetstream(ctx, time.Time{}, "ops", now); !errors.Is(err, ErrNothingToReset) {
		t.Errorf("jetstream: %v", err)
	}
	if _, err := s.ResetAccount(ctx, did("nobody"), "", "ops", now); !errors.Is(err, ErrNothingToReset) {
		t.Errorf("account: %v", err)
	}
	if _, err := s.ResetViewer(ctx, did("nobody"), "", "ops", now); !errors.Is(err, ErrNothingToReset) {
		t.Errorf("viewer: %v", err)
	}
	if entries, _ := s.Audit(ctx, 10); len(entries) != 0 {
		t.Errorf("audit recorded %+v", entries)
	}
}

func TestResetViewerAndAccountStartOver(t *testing.T) {
	s := openViewerMode(t)
	ctx := context.Background()
	now := time.Unix(1_000, 0)
	s.RegisterViewer(ctx, did("alice"), "following", now)
	s.ClaimFirstRead(ctx, did("alice"), "following", "me", now, time.Minute)
	s.ApplyListingPage(ctx, &ListingPage{Account: did("alice"), Collection: followNSID, To: Listing{Round: 1, Page: 1, Complete: true}}, now)
	s.ApplyListingPage(ctx, &ListingPage{Account: did("alice"), Collection: postNSID, To: Listing{Round: 1, Page: 1, Complete: true}}, now)
	if _, err := s.CompleteFirstRead(ctx, did("alice"), "following", "me", now); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ResetViewer(ctx, did("alice"), "following", "ops", now); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.RegisterViewer(ctx, did("alice"), "following", now); st.Complete {
		t.Error("viewer still complete after reset")
	}
	if l, _ := s.ReadListing(ctx, did("alice"), followNSID); l.Complete || l.Round != 2 {
		t.Errorf("follow listing after viewer reset: %+v", l)
	}
	if _, err := s.ResetAccount(ctx, did("alice"), postNSID, "ops", now); err != nil {
		t.Fatal(err)
	}
	if l, _ := s.ReadListing(ctx, did("alice"), postNSID); l.Complete || l.Round != 2 {
		t.Errorf("post listing after account reset: %+v", l)
	}
	r, err := s.Report(ctx)
	if err != nil || len(r.Feeds) != 1 || r.Feeds[0].Viewers != 1 {
		t.Errorf("report %+v %v", r, err)
	}
}
