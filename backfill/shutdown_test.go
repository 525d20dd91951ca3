package backfill

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/pds/pdstest"
)

// The daemon serves getFeed and starts the backfill's Run together, so a
// first read can start before Run has its context. Shutdown (Run's
// context ending) must still cancel it: it gives its claim back and is
// charged no attempt, rather than running on into a closed store until
// its own timeout.
func TestAFirstReadStartedBeforeRunEndsWithRun(t *testing.T) {
	w := newWorld(t, Config{FirstReadWait: 1})
	viewer := w.account("viewer")
	w.pds.Fail(viewer, followNSID, pdstest.FaultHang)
	asked := make(chan struct{})
	var once sync.Once
	w.gate.Store(func(r *http.Request) {
		if r.URL.Query().Get("repo") == string(viewer) {
			once.Do(func() { close(asked) })
		}
	})
	svc := New(w.svc.cfg, w.store, w.svc.resolver, w.svc.pds,
		[]Feed{{Name: "following", FollowCollection: followNSID, Targets: []syntax.NSID{postNSID}}}, nil, nil)
	ctx := context.Background()
	if err := svc.Ensure(ctx, viewer, "following", "client"); err != nil {
		t.Fatal(err)
	}
	<-asked // the run is under way, on the context it had before Run
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { svc.Run(rctx); close(done) }()
	cancel()
	<-done
	st, err := w.store.RegisterViewer(ctx, viewer, "following", w.clock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Attempts != 0 || st.Complete {
		t.Fatalf("after shutdown the first read begun before Run was %+v, want cancelled: no attempt, not complete", st)
	}
}
