package backfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/directory"
	"github.com/atfeeds/appview/directory/plctest"
	"github.com/atfeeds/appview/egress"
	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/internal/writelock"
	"github.com/atfeeds/appview/pds"
	"github.com/atfeeds/appview/pds/pdstest"
)

const (
	followNSID = syntax.NSID("app.bsky.graph.follow")
	postNSID   = syntax.NSID("app.bsky.feed.post")
)

// world is a fake network: a PLC directory and one PDS on loopback.
type world struct {
	plc   *plctest.Server
	pds   *pdstest.Server
	store *feeds.Store
	path  string // the store's database file
	svc   *Service
	// clock is the service's now; mu guards it where a run reads it
	// concurrently (advance).
	mu    sync.Mutex
	clock time.Time
	// gate, when set, sees every PDS and PLC request before it is sent.
	gate atomic.Value // func(*http.Request)
	// onNow, when set, sees every reading of the service's clock: a test
	// commits something at a point in a run through it.
	onNow atomic.Value // func(time.Time)
	// onJoin, when set, hears each caller that joins a running fetch of
	// an account's records (Service.joined).
	onJoin atomic.Value // func(accountKey)
	// stop ends the service's Run and waits for it to return.
	stop func()
}

type gatedTransport struct {
	w    *world
	next http.RoundTripper
}

func (g gatedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if f, ok := g.w.gate.Load().(func(*http.Request)); ok {
		f(r)
	}
	return g.next.RoundTrip(r)
}

func did(name string) syntax.DID { return syntax.DID("did:plc:" + name) }

// tid makes a record key whose embedded time is n seconds after 2026-01-01.
func tid(n int) syntax.RecordKey {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return syntax.RecordKey(syntax.NewTIDFromTime(base.Add(time.Duration(n)*time.Second), 0))
}

func newWorld(t *testing.T, cfg Config) *world {
	t.Helper()
	w := &world{plc: plctest.NewServer(), pds: pdstest.NewServer(), clock: time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)}
	t.Cleanup(w.plc.Close)
	t.Cleanup(w.pds.Close)
	w.path = t.TempDir() + "/appview.db"
	st, err := feeds.Open(context.Background(), feeds.Options{
		Path: w.path,
		Feeds: []feeds.Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 100,
			Targets: []feeds.Target{{Collection: postNSID, Cap: 200}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	w.store = st
	httpc := egress.NewClient(egress.Options{AllowPrivateNetworks: true, Timeout: 5 * time.Second})
	httpc.Transport = gatedTransport{w: w, next: httpc.Transport}
	dir := directory.New(directory.Config{PLCURL: w.plc.URL(), HTTPClient: httpc, AllowPrivateNetworks: true, SkipHandleVerification: true})
	cfg.Now = func() time.Time {
		w.mu.Lock()
		now := w.clock
		w.mu.Unlock()
		if f, ok := w.onNow.Load().(func(time.Time)); ok {
			f(now)
		}
		return now
	}
	if cfg.FirstReadWait == 0 {
		cfg.FirstReadWait = 20 * time.Second
	}
	w.svc = New(cfg, st, dir, pds.NewClient(httpc, pds.Options{Timeout: 2 * time.Second}),
		[]Feed{{Name: "following", FollowCollection: followNSID, Targets: []syntax.NSID{postNSID}}}, nil, nil)
	w.svc.joined = func(k accountKey) {
		if f, ok := w.onJoin.Load().(func(accountKey)); ok {
			f(k)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.svc.Run(ctx); close(done) }()
	w.stop = func() { cancel(); <-done }
	t.Cleanup(w.stop)
	return w
}

// hogARunningPlace starts the first read of a new viewer, name, who
// follows followee and whose PDS never answers its follows listing, and
// returns once its run holds a running place (for its whole run timeout).
func (w *world) hogARunningPlace(name string, followee syntax.DID) {
	hog := w.account(name)
	w.follow(hog, followee, 2)
	w.pds.Fail(hog, followNSID, pdstest.FaultHang)
	running := make(chan struct{})
	var once sync.Once
	w.gate.Store(func(r *http.Request) {
		if r.URL.Query().Get("repo") == string(hog) {
			once.Do(func() { close(running) })
		}
	})
	go w.svc.Ensure(context.Background(), hog, "following", name+"-client")
	<-running
}

// advance moves the clock while runs may read it.
func (w *world) advance(d time.Duration) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.clock = w.clock.Add(d)
	return w.clock
}

// account creates a repo on the fake PDS.
func (w *world) account(name string) syntax.DID {
	d := did(name)
	w.plc.Add(d, syntax.Handle(name+".test"), w.pds.URL())
	w.pds.AddRepo(d)
	return d
}

func (w *world) follow(who, whom syntax.DID, n int) syntax.RecordKey {
	rk := tid(n)
	w.pds.AddRecord(who, followNSID, rk, fmt.Sprintf(`{"$type":"app.bsky.graph.follow","subject":%q,"createdAt":"2026-01-01T00:00:00Z"}`, whom))
	return rk
}

func (w *world) post(author syntax.DID, n int) syntax.RecordKey {
	rk := tid(n)
	created := time.Date(2026, 1, 1, 0, 0, n, 0, time.UTC).Format(time.RFC3339)
	w.pds.AddRecord(author, postNSID, rk, fmt.Sprintf(`{"$type":"app.bsky.feed.post","text":"post %d","createdAt":%q}`, n, created))
	return rk
}

func (w *world) page(t *testing.T, viewer syntax.DID, limit int) []string {
	t.Helper()
	p, err := w.store.ReadFeed(context.Background(), feeds.PageQuery{Feed: "following", Viewer: viewer, Collection: postNSID, Limit: limit})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, it := range p.Items {
		out = append(out, it.DID+"/"+it.RKey)
	}
	return out
}

func TestFirstReadFillsTheFirstPage(t *testing.T) {
	// 500 listings take about 14 s under -race on two cores, and more
	// beside the other packages' tests: the wait is what Ensure promises,
	// not a speed bar, so it is long enough never to cut the read short.
	w := newWorld(t, Config{Depth: 5, FirstReadWait: 2 * time.Minute})
	viewer := w.account("viewer")
	n := 0
	var newest []string
	for i := range 500 {
		acct := w.account(fmt.Sprint("acct", i))
		w.follow(viewer, acct, i)
		for range 3 {
			n++
			rk := w.post(acct, 1000+n)
			newest = append(newest, string(acct)+"/"+string(rk))
		}
	}
	if err := w.svc.Ensure(context.Background(), viewer, "following", "test"); err != nil {
		t.Fatal(err)
	}
	got := w.page(t, viewer, 50)
	if len(got) != 50 {
		t.Fatalf("first page has %d items, want 50", len(got))
	}
	for i := range 50 {
		if want := newest[len(newest)-1-i]; got[i] != want {
			t.Fatalf("item %d = %s, want %s", i, got[i], want)
		}
	}
	st, err := w.store.ReadListing(context.Background(), viewer, followNSID)
	if err != nil || !st.Complete || st.Page != 6 {
		t.Fatalf("follow listing = %+v, %v; want complete after 5 full pages and an empty one", st, err)
	}
	// A second read does not go back to the PDS.
	before := w.pds.TotalRequests()
	if err := w.svc.Ensure(context.Background(), viewer, "following", "test"); err != nil {
		t.Fatal(err)
	}
	if after := w.pds.TotalRequests(); after != before {
		t.Errorf("second read made %d PDS requests", after-before)
	}
}

func TestConcurrentFirstReadsRunOneBackfill(t *testing.T) {
	w := newWorld(t, Config{})
	viewer := w.account("viewer")
	for i := range 20 {
		acct := w.account(fmt.Sprint("acct", i))
		w.follow(viewer, acct, i)
		w.post(acct, 100+i)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.svc.Ensure(context.Background(), viewer, "following", "test"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	// One run: a short page, and the empty page that confirms the end.
	if got := w.pds.Requests(viewer, followNSID); got != 2 {
		t.Errorf("follow listing requested %d times, want 2 (one run)", got)
	}
	for i := range 20 {
		if got := w.pds.Requests(did(fmt.Sprint("acct", i)), postNSID); got != 1 {
			t.Errorf("acct%d posts requested %d times, want 1", i, got)
		}
	}
	if got := len(w.page(t, viewer, 100)); got != 20 {
		t.Errorf("feed has %d items, want 20", got)
	}
}

func TestAccountsAreFetchedOnceAcrossViewers(t *testing.T) {
	w := newWorld(t, Config{})
	shared := w.account("shared")
	w.post(shared, 1)
	for _, v := range []string{"v1", "v2"} {
		viewer := w.account(v)
		w.follow(viewer, shared, 1)
		if err := w.svc.Ensure(context.Background(), viewer, "following", "test"); err != nil {
			t.Fatal(err)
		}
		if got := len(w.page(t, viewer, 10)); got != 1 {
			t.Errorf("%s feed has %d items", v, got)
		}
	}
	if got := w.pds.Requests(shared, postNSID); got != 1 {
		t.Errorf("shared account fetched %d times, want once", got)
	}
}

func TestFailingFolloweeDoesNotFailTheFirstRead(t *testing.T) {
	w := newWorld(t, Config{})
	viewer := w.account("viewer")
	good, bad := w.account("good"), w.account("bad")
	w.follow(viewer, good, 1)
	w.follow(viewer, bad, 2)
	w.post(good, 10)
	w.post(bad, 11)
	w.pds.Fail(bad, postNSID, pdstest.FaultStatus500)
	if err := w.svc.Ensure(context.Background(), viewer, "following", "test"); err != nil {
		t.Fatal(err)
	}
	if got := w.page(t, viewer, 10); len(got) != 1 || got[0] != string(good)+"/"+string(tid(10)) {
		t.Errorf("feed = %v, want the good account's post", got)
	}
	st, _ := w.store.ReadListing(context.Background(), bad, postNSID)
	if st.Complete || st.Attempts != 1 || st.LastError == "" || !st.NextRetry.After(w.clock) {
		t.Errorf("bad account listing = %+v, want a recorded failure with a retry time", st)
	}
}

func TestViewerPDSDownRecordsFailureAndRetries(t *testing.T) {
	w := newWorld(t, Config{RetryBase: time.Minute})
	viewer := w.account("viewer")
	acct := w.account("acct")
	w.follow(viewer, acct, 1)
	w.post(acct, 2)
	w.pds.Fail(viewer, followNSID, pdstest.FaultStatus500)
	w.svc.Ensure(context.Background(), viewer, "following", "test")
	if got := w.page(t, viewer, 10); len(got) != 0 {
		t.Fatalf("feed after a failed first read = %v", got)
	}
	// Not due yet: no new attempt.
	before := w.pds.Requests(viewer, followNSID)
	w.svc.Ensure(context.Background(), viewer, "following", "test")
	if w.pds.Requests(viewer, followNSID) != before {
		t.Fatal("retried before the scheduled time")
	}
	w.pds.Fail(viewer, followNSID, pdstest.FaultNone)
	w.clock = w.clock.Add(2 * time.Minute)
	w.svc.Ensure(context.Background(), viewer, "following", "test")
	if got := w.page(t, viewer, 10); len(got) != 1 {
		t.Fatalf("feed after the retry = %v, want 1 item", got)
	}
}

// A complete viewer whose last read is fresh is served without a write by
// a process that has not seen it yet (as after a restart): the read pool
// says so and the viewer is remembered from its stored last read, so the
// write comes an hour after that read, and after the read is served.
func TestKnownViewerIsServedWithoutAWriteAfterARestart(t *testing.T) {
	w := newWorld(t, Config{})
	viewer := w.account("viewer")
	ctx := context.Background()
	if err := w.svc.Ensure(ctx, viewer, "following", "test"); err != nil {
		t.Fatal(err)
	}
	firstRead := w.clock
	key := viewerKey{viewer, "following"}

	w.forgetViewer(key) // a new process knows no viewer
	w.clock = firstRead.Add(20 * time.Minute)
	if err := w.svc.Ensure(ctx, viewer, "following", "test"); err != nil {
		t.Fatal(err)
	}
	if got := w.remembered(key); !got.Equal(firstRead) {
		t.Fatalf("remembered from %v, want the stored last read %v (no write)", got, firstRead)
	}
	if got := w.storedLastRead(t, viewer); !got.Equal(firstRead) {
		t.Fatalf("last read stored as %v, want %v", got, firstRead)
	}

	// An hour after the stored last read the read is written again, once
	// the service has written what it queued (at the latest as it stops).
	w.forgetViewer(key)
	w.clock = firstRead.Add(61 * time.Minute)
	if err := w.svc.Ensure(ctx, viewer, "following", "test"); err != nil {
		t.Fatal(err)
	}
	if got := w.remembered(key); !got.Equal(w.clock) {
		t.Fatalf("remembered from %v, want %v", got, w.clock)
	}
	w.stop()
	if got := w.storedLastRead(t, viewer); !got.Equal(w.clock) {
		t.Fatalf("last read stored as %v after an hour, want %v", got, w.clock)
	}
}

// A complete viewer's read an hour after its last one, in a process that
// knows it and in one that does not yet, is served while another
// connection holds the write lock: its last read is written afterwards.
// It used to be written before the read was answered, so behind a
// catch-up batch every such read waited seconds (docs/benchmarks.md,
// fifteenth round), and behind an operator command's transaction it
// failed with the busy timeout.
func TestACompleteViewersReadDoesNotWaitForTheWriter(t *testing.T) {
	for _, restarted := range []bool{false, true} {
		t.Run(fmt.Sprintf("restarted=%v", restarted), func(t *testing.T) {
			w := newWorld(t, Config{})
			viewer := w.account("viewer")
			alice := w.account("alice")
			w.follow(viewer, alice, 1)
			w.post(alice, 10)
			if err := w.svc.Ensure(context.Background(), viewer, "following", "test"); err != nil {
				t.Fatal(err)
			}
			if restarted {
				w.forgetViewer(viewerKey{viewer, "following"})
			}
			w.advance(2 * time.Hour)
			release := writelock.Hold(t, w.path)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second) // under the 5 s busy timeout
			defer cancel()
			if err := w.svc.Ensure(ctx, viewer, "following", "test"); err != nil {
				t.Fatalf("read with the write lock held elsewhere: %v", err)
			}
			if got := w.page(t, viewer, 10); len(got) != 1 {
				t.Fatalf("feed = %v, want alice's post", got)
			}
			release()
			w.stop()
			if got := w.storedLastRead(t, viewer); !got.Equal(w.clock) {
				t.Fatalf("last read stored as %v, want %v", got, w.clock)
			}
		})
	}
}

// A viewer within an hour of retirement has its read written before it is
// served: a retirement between the answer and a later write would empty
// the feed the read was told is complete, and the memory of it would
// hide that for an hour.
func TestAViewerNearRetirementWritesItsReadBeforeItIsServed(t *testing.T) {
	w := newWorld(t, Config{ViewerTTL: 3 * time.Hour})
	viewer := w.account("viewer")
	ctx := context.Background()
	if err := w.svc.Ensure(ctx, viewer, "following", "test"); err != nil {
		t.Fatal(err)
	}
	w.forgetViewer(viewerKey{viewer, "following"})
	w.advance(2*time.Hour + 30*time.Minute)
	if err := w.svc.Ensure(ctx, viewer, "following", "test"); err != nil {
		t.Fatal(err)
	}
	if got := w.storedLastRead(t, viewer); !got.Equal(w.clock) {
		t.Fatalf("last read stored as %v when the read was served, want %v", got, w.clock)
	}
}

// forgetViewer drops the service's memory of a complete viewer, as a new
// process has none.
func (w *world) forgetViewer(key viewerKey) {
	w.svc.mu.Lock()
	w.svc.complete.delete(key)
	w.svc.mu.Unlock()
}

// remembered is when the service remembers the viewer as complete from.
func (w *world) remembered(key viewerKey) time.Time {
	w.svc.mu.Lock()
	defer w.svc.mu.Unlock()
	t, _ := w.svc.complete.get(key)
	return t
}

// storedLastRead is the viewer's last read as stored, read without a
// write; the viewer must be complete.
func (w *world) storedLastRead(t *testing.T, viewer syntax.DID) time.Time {
	t.Helper()
	last, complete, err := w.store.StoredViewer(context.Background(), viewer, "following")
	if err != nil || !complete {
		t.Fatalf("viewer: complete %v, err %v", complete, err)
	}
	return last
}

// A viewer whose follow listing waits out a PDS's Retry-After, longer than
// the viewer's own retry schedule, waits with it: no attempt is counted
// while the listing is not due, so the viewer is not given up on while
// nothing was tried, and its feed is built once the PDS answers. The 429
// itself counts one: a PDS that always answers 429 has its viewer given
// up on like any failing one.
func TestViewerWaitsForItsListingWithoutUsingAttempts(t *testing.T) {
	w := newWorld(t, Config{RetryBase: time.Second, MaxAttempts: 2})
	viewer := w.account("viewer")
	acct := w.account("acct")
	w.follow(viewer, acct, 1)
	w.post(acct, 2)
	w.pds.Fail(viewer, followNSID, pdstest.FaultRateLimited) // Retry-After: 7 s
	ctx := context.Background()
	w.svc.Ensure(ctx, viewer, "following", "test")
	for range 3 {
		w.advance(2 * time.Second) // the viewer is due, its listing is not
		w.svc.Ensure(ctx, viewer, "following", "test")
	}
	st, err := w.store.RegisterViewer(ctx, viewer, "following", w.clock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Attempts != 1 {
		t.Errorf("viewer attempts = %d, want 1: only the request that met the 429 counts", st.Attempts)
	}
	w.pds.Fail(viewer, followNSID, pdstest.FaultNone)
	w.advance(10 * time.Second)
	w.svc.Ensure(ctx, viewer, "following", "test")
	if got := w.page(t, viewer, 10); len(got) != 1 {
		t.Fatalf("feed once the listing was due again = %v, want 1 item", got)
	}
}

// A daemon that stops while a first read runs waits for it to give its
// claim back: otherwise the store closes under it, and after a restart
// the viewer stays claimed, and its feed empty, for a lease.
func TestStoppingWaitsForRunningFirstReadsToRelease(t *testing.T) {
	w := newWorld(t, Config{FirstReadWait: 50 * time.Millisecond})
	viewer := w.account("viewer")
	acct := w.account("acct")
	w.follow(viewer, acct, 1)
	blocked := make(chan struct{})
	var once sync.Once
	w.gate.Store(func(r *http.Request) {
		if r.URL.Query().Get("repo") == string(viewer) {
			once.Do(func() { close(blocked) })
			<-r.Context().Done() // the viewer's PDS hangs until shutdown
		}
	})
	w.svc.Ensure(context.Background(), viewer, "following", "test") // returns after its wait; the run goes on
	<-blocked
	w.stop()
	st, err := w.store.RegisterViewer(context.Background(), viewer, "following", w.clock)
	if err != nil {
		t.Fatal(err)
	}
	if st.ClaimOwner != "" {
		t.Errorf("after the service stopped the viewer is still claimed by %s until %v", st.ClaimOwner, st.ClaimUntil)
	}
}

// A first read cut off by its run timeout leaves the followee listings it
// had not finished as they were: no attempt counted, no retry delay. They
// stay due for the retry loop. (Before, each was
// charged a failed attempt as if its PDS had failed, the ones that never
// got a request slot included, and six such gave the account up; found by
// a review.)
func TestRunTimeoutChargesNoFolloweeListing(t *testing.T) {
	w := newWorld(t, Config{RunTimeout: time.Second, FirstReadWait: 5 * time.Second, Concurrency: 4, PerHost: 4})
	viewer := w.account("viewer")
	var accounts []syntax.DID
	for i := range 12 {
		a := w.account(fmt.Sprint("acct", i))
		accounts = append(accounts, a)
		w.follow(viewer, a, i)
		w.post(a, 100+i)
		w.pds.Fail(a, postNSID, pdstest.FaultDelayed) // answers after pdstest.Delay
	}
	if err := w.svc.Ensure(context.Background(), viewer, "following", "test"); err != nil {
		t.Fatal(err)
	}
	due, err := w.store.DueListings(context.Background(), w.clock, w.svc.cfg.MaxAttempts, 100)
	if err != nil {
		t.Fatal(err)
	}
	unfinished, asked := 0, 0
	for _, a := range accounts {
		st, err := w.store.ReadListing(context.Background(), a, postNSID)
		if err != nil {
			t.Fatal(err)
		}
		if st.Complete {
			continue
		}
		unfinished++
		if st.Attempts != 0 || st.LastError != "" {
			t.Errorf("%s (asked %d times): attempts %d, last error %q; want none counted", a, w.pds.Requests(a, postNSID), st.Attempts, st.LastError)
		}
		if w.pds.Requests(a, postNSID) > 0 {
			// A fetch under way when the run ended may have been shared
			// with a first read that completed without it.
			asked++
			if !slices.Contains(due, feeds.ListingKey{Account: a, Collection: postNSID}) {
				t.Errorf("%s was being fetched when the run ended, and is not due for the retry loop", a)
			}
		}
	}
	if unfinished == 0 || asked == 0 {
		t.Fatalf("%d listings unfinished, %d of them asked: the test proves nothing", unfinished, asked)
	}
}

// A viewer that follows itself: its own posts are not fetched at its first
// read (they never reach its feed, and a self-follow puts no account in
// scope, so the stream's deletes of them would be dropped and the copies
// go stale), and the feed holds what it follows.
func TestAFirstReadDoesNotFetchTheViewersOwnPosts(t *testing.T) {
	w := newWorld(t, Config{})
	viewer, alice := w.account("viewer"), w.account("alice")
	w.follow(viewer, viewer, 1)
	w.follow(viewer, alice, 2)
	w.post(viewer, 10)
	kept := w.post(alice, 11)
	if err := w.svc.Ensure(context.Background(), viewer, "following", "test"); err != nil {
		t.Fatal(err)
	}
	if n := w.pds.Requests(viewer, postNSID); n != 0 {
		t.Errorf("the viewer's own posts were listed %d times", n)
	}
	if got, want := w.page(t, viewer, 10), []string{string(alice) + "/" + string(kept)}; !slices.Equal(got, want) {
		t.Errorf("feed = %v, want %v", got, want)
	}
}

// ourContextEnded blames the caller's context only for a listing that
// failed: one that completed just as the context ended records its run
// (found by a review: a nil error counted as ended).
func TestOurContextEndedNeedsAFailure(t *testing.T) {
	live := context.Background()
	ended, cancel := context.WithCancel(live)
	cancel()
	failure := errors.New("pds: status 500")
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"completed", live, nil, false},
		{"completed as the context ended", ended, nil, false},
		{"failed as the context ended", ended, failure, true},
		{"cancelled", live, context.Canceled, true},
		{"the PDS failed", live, failure, false},
	} {
		if got := ourContextEnded(tc.ctx, tc.err); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A viewer whose PDS host is paused by another account's 429 (no request
// for the viewer was sent) is deferred to the pause's end, with no attempt
// counted. Before, each such first read counted an attempt, and after
// MaxAttempts the viewer was given up on, though its own listing was
// never asked (found by a review).
func TestAHostPauseCostsAViewerNoAttempt(t *testing.T) {
	w := newWorld(t, Config{RetryBase: time.Second, MaxAttempts: 2})
	v1, z, v2 := w.account("v1"), w.account("z"), w.account("v2")
	w.follow(v1, z, 1)
	w.post(z, 2)
	w.follow(v2, z, 3)
	w.pds.Fail(z, postNSID, pdstest.FaultRateLimited) // Retry-After 7 s
	ctx := context.Background()
	if err := w.svc.Ensure(ctx, v1, "following", "c1"); err != nil { // z answers 429: the host pauses
		t.Fatal(err)
	}
	for i := range 2 {
		if err := w.svc.Ensure(ctx, v2, "following", "c2"); err != nil { // paused: nothing asked
			t.Fatal(err)
		}
		if n := w.pds.Requests(v2, followNSID); n != 0 {
			t.Fatalf("round %d: v2's follows were asked %d times while the host was paused", i, n)
		}
		w.advance(8 * time.Second)
		w.svc.forgetComplete()
		w.svc.retryDue(ctx) // z is due again: another 429, another pause
	}
	if st, _ := w.store.RegisterViewer(ctx, v2, "following", w.clock); st.Attempts != 0 {
		t.Fatalf("v2 counted %d attempts (%s) though nothing was asked for it", st.Attempts, st.LastError)
	}
	w.advance(time.Minute)
	w.svc.forgetComplete()
	w.pds.Fail(z, postNSID, pdstest.FaultNone)
	if err := w.svc.Ensure(ctx, v2, "following", "c2"); err != nil {
		t.Fatal(err)
	}
	if st, _ := w.store.RegisterViewer(ctx, v2, "following", w.clock); !st.Complete {
		t.Errorf("v2 not complete once the host answers: %+v", st)
	}
}

// A viewer whose own PDS answers every follow listing with 429 is given up
// on after MaxAttempts, like any failing viewer: a 429 to its own request
// counts (only a host pause begun by another account's 429 does not).
// Counting none retried it at every read past each Retry-After, for good
// (found by a review of 5c90680).
func TestAViewerWhosePDSAlwaysRateLimitsIsGivenUp(t *testing.T) {
	w := newWorld(t, Config{RetryBase: time.Second, MaxAttempts: 2})
	viewer := w.account("viewer")
	w.follow(viewer, w.account("acct"), 1)
	w.pds.Fail(viewer, followNSID, pdstest.FaultRateLimited) // Retry-After: 7 s
	ctx := context.Background()
	for range 20 {
		if err := w.svc.Ensure(ctx, viewer, "following", "test"); err != nil {
			t.Fatal(err)
		}
		w.advance(time.Minute)
		w.svc.forgetComplete()
	}
	st, _ := w.store.RegisterViewer(ctx, viewer, "following", w.clock)
	if st.Attempts < 2 {
		t.Errorf("viewer attempts %d after 20 reads against an always-429 PDS, want MaxAttempts (2)", st.Attempts)
	}
	if n := w.pds.Requests(viewer, followNSID); n > 2 {
		t.Errorf("the always-429 PDS was asked %d times, want at most MaxAttempts (2)", n)
	}
}

// liveFollowChange is the stream's create of a follow of whom by who.
func liveFollowChange(who, whom syntax.DID) feeds.Change {
	return feeds.Change{
		DID: who, Collection: followNSID, RKey: tid(1), Op: feeds.OpCreate, Rev: tid(1).String(),
		CID: "bafyfollow", Subject: whom, TimeUS: 1,
		Record: json.RawMessage(fmt.Sprintf(`{"$type":"app.bsky.graph.follow","subject":%q}`, whom)),
	}
}

// liveFollow applies liveFollowChange as a batch of the stream.
func (w *world) liveFollow(t *testing.T, who, whom syntax.DID) {
	t.Helper()
	if _, err := w.store.ApplyBatch(context.Background(), &feeds.Batch{Changes: []feeds.Change{liveFollowChange(who, whom)},
		Cursor: feeds.StreamCursor{TimeUS: 1}}); err != nil {
		t.Fatal(err)
	}
}
