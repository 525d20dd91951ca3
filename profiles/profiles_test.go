package profiles

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/atfeeds/appview/directory"
	"github.com/atfeeds/appview/directory/plctest"
	"github.com/atfeeds/appview/egress"
	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/internal/testclock"
	"github.com/atfeeds/appview/internal/writelock"
	"github.com/atfeeds/appview/pds"
	"github.com/atfeeds/appview/pds/pdstest"
)

const (
	followNSID = syntax.NSID("app.bsky.graph.follow")
	postNSID   = syntax.NSID("app.bsky.feed.post")
	avatar     = "bafkreibme22gw2h7y2h7tg2fhqotaqjucnbc24deqo72b6mkl2egezxhvy"
)

// world is a store whose only viewer, alice, follows the given accounts,
// a fake PLC and PDS on loopback, and a running Service.
type world struct {
	store *feeds.Store
	plc   *plctest.Server
	pds   *pdstest.Server
	svc   *Service
	reg   *prometheus.Registry
	clock *testclock.Clock
	// path is the database file.
	path string
	// wrapStore, set before newWorld, stands between the service and
	// the store.
	wrapStore func(*feeds.Store) Store
}

func did(name string) syntax.DID { return syntax.DID("did:plc:" + name) }

func newWorld(t *testing.T, cfg Config, followed ...string) *world {
	t.Helper()
	return newWorldWith(t, nil, cfg, followed...)
}

func newWorldWith(t *testing.T, wrapStore func(*feeds.Store) Store, cfg Config, followed ...string) *world {
	t.Helper()
	w := &world{plc: plctest.NewServer(), pds: pdstest.NewServer(), reg: prometheus.NewRegistry(),
		clock: testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), wrapStore: wrapStore}
	t.Cleanup(w.plc.Close)
	t.Cleanup(w.pds.Close)
	ctx := context.Background()
	w.path = t.TempDir() + "/appview.db"
	store, err := feeds.Open(ctx, feeds.Options{
		Path: w.path, Profiles: true, IndexAll: true,
		Feeds: []feeds.Feed{{Name: "following", FollowCollection: followNSID, Targets: []feeds.Target{{Collection: postNSID, Cap: 10}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	w.store = store
	var changes []feeds.Change
	for i, name := range followed {
		w.plc.Add(did(name), syntax.Handle(name+".test"), w.pds.URL())
		w.pds.AddRepo(did(name))
		changes = append(changes, feeds.Change{
			DID: did("alice"), Collection: followNSID, RKey: syntax.RecordKey(fmt.Sprintf("f%d", i)), Op: feeds.OpCreate,
			Rev: fmt.Sprintf("3k%011d", i), CID: "bafyfollow", Subject: did(name), TimeUS: int64(i + 1),
			Record: json.RawMessage(fmt.Sprintf(`{"$type":"app.bsky.graph.follow","subject":%q}`, did(name))),
		})
	}
	if _, err := store.ApplyBatch(ctx, &feeds.Batch{Changes: changes, Cursor: feeds.StreamCursor{TimeUS: 100}}); err != nil {
		t.Fatal(err)
	}
	httpc := egress.NewClient(egress.Options{AllowPrivateNetworks: true, Timeout: 5 * time.Second})
	dir := directory.New(directory.Config{PLCURL: w.plc.URL(), HandleResolverURL: w.plc.URL(), HTTPClient: httpc,
		AllowPrivateNetworks: true, SkipHandleVerification: true, Now: w.clock.Now})
	cfg.Now = w.clock.Now
	var st Store = store
	if w.wrapStore != nil {
		st = w.wrapStore(store)
	}
	w.svc = New(cfg, st, dir, pds.NewClient(httpc, pds.Options{}), nil, NewMetrics(w.reg))
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.svc.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	return w
}

func (w *world) profileRecord(name, displayName string) {
	w.pds.AddRecord(did(name), feeds.ProfileCollection, feeds.ProfileRKey, fmt.Sprintf(
		`{"$type":"app.bsky.actor.profile","displayName":%q,"avatar":{"$type":"blob","ref":{"$link":%q},"mimeType":"image/png","size":3}}`,
		displayName, avatar))
}

func (w *world) hydrate(t *testing.T, names ...string) ([]feeds.Profile, time.Duration) {
	t.Helper()
	var dids []syntax.DID
	for _, n := range names {
		dids = append(dids, did(n))
	}
	start := time.Now()
	ps, err := w.svc.Hydrate(context.Background(), dids)
	if err != nil {
		t.Fatal(err)
	}
	return ps, time.Since(start)
}

func (w *world) profileRequests(name string) int {
	return w.pds.Requests(did(name), feeds.ProfileCollection)
}

func TestMissingProfileIsFetchedWithinTheWait(t *testing.T) {
	w := newWorld(t, Config{Wait: 5 * time.Second}, "carol", "dave")
	w.profileRecord("carol", "Carol")
	// dave has no profile record.

	ps, _ := w.hydrate(t, "carol", "dave")
	carol, dave := ps[0], ps[1]
	if !carol.Complete() || !carol.Present || carol.Handle != "carol.test" || carol.Fields.DisplayName != "Carol" ||
		carol.Fields.Avatar == nil || carol.Fields.Avatar.CID != avatar {
		t.Fatalf("carol = %+v", carol)
	}
	if !dave.Complete() || dave.Present || dave.Handle != "dave.test" {
		t.Fatalf("dave = %+v", dave)
	}
	// Stored: the next read asks nobody.
	ps, _ = w.hydrate(t, "carol", "dave")
	if ps[0].Fields.DisplayName != "Carol" || w.profileRequests("carol") != 1 || w.profileRequests("dave") != 1 {
		t.Fatalf("second read: %+v, requests %d %d", ps, w.profileRequests("carol"), w.profileRequests("dave"))
	}
	if got := testutil.ToFloat64(w.svc.metrics.fetches.WithLabelValues("stored")); got != 1 {
		t.Errorf("stored fetches = %v", got)
	}
	if got := testutil.ToFloat64(w.svc.metrics.answers.WithLabelValues("stored")); got != 2 {
		t.Errorf("answers from the store = %v", got)
	}
}

// A slow PDS costs the reader the wait and no more; the fetch goes on in
// the background and a later read has the profile.
func TestSlowPDSDoesNotHoldTheRead(t *testing.T) {
	const wait = 100 * time.Millisecond
	w := newWorld(t, Config{Wait: wait}, "carol")
	w.profileRecord("carol", "Carol")
	// Seconds, so a loaded machine's scheduling is not taken for a read
	// that waited for the PDS (a review found 400 ms of slack).
	const slow = 3 * time.Second
	w.pds.SetDelay(slow)
	w.pds.FailN(did("carol"), feeds.ProfileCollection, pdstest.FaultDelayed, 1)

	ps, took := w.hydrate(t, "carol")
	if ps[0].Known {
		t.Fatalf("first read has the profile: %+v", ps[0])
	}
	if took >= slow {
		t.Fatalf("first read took %v with a %v wait: it waited for the slow PDS", took, wait)
	}
	deadline := time.Now().Add(slow + 10*time.Second)
	for {
		ps, _ = w.hydrate(t, "carol")
		if ps[0].Known {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the profile never arrived")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ps[0].Fields.DisplayName != "Carol" || w.profileRequests("carol") != 1 {
		t.Fatalf("later read: %+v after %d requests", ps[0], w.profileRequests("carol"))
	}
	if got := testutil.ToFloat64(w.svc.metrics.answers.WithLabelValues("missing")); got < 1 {
		t.Errorf("missing answers = %v", got)
	}
}

// Concurrent reads of one account share one fetch.
func TestConcurrentReadsShareOneFetch(t *testing.T) {
	w := newWorld(t, Config{Wait: 5 * time.Second}, "carol")
	w.profileRecord("carol", "Carol")
	w.pds.FailN(did("carol"), feeds.ProfileCollection, pdstest.FaultDelayed, 1)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ps, _ := w.hydrate(t, "carol"); ps[0].Fields.DisplayName != "Carol" {
				t.Errorf("carol = %+v", ps[0])
			}
		}()
	}
	wg.Wait()
	if n := w.profileRequests("carol"); n != 1 {
		t.Fatalf("%d PDS requests, want 1", n)
	}
}

// A failed fetch is not retried at every read, only after RetryAfter.
func TestFailedFetchIsHeldBack(t *testing.T) {
	w := newWorld(t, Config{Wait: 5 * time.Second, RetryAfter: time.Minute}, "carol")
	w.profileRecord("carol", "Carol")
	w.pds.FailN(did("carol"), feeds.ProfileCollection, pdstest.FaultStatus500, 1)

	if ps, _ := w.hydrate(t, "carol"); ps[0].Known || !ps[0].HandleKnown || ps[0].Handle != "carol.test" {
		t.Fatalf("after a 500: %+v", ps[0]) // the handle was still verified and stored
	}
	if ps, _ := w.hydrate(t, "carol"); ps[0].Known || w.profileRequests("carol") != 1 {
		t.Fatalf("held back: %+v, %d requests", ps[0], w.profileRequests("carol"))
	}
	w.clock.Advance(time.Minute)
	if ps, _ := w.hydrate(t, "carol"); ps[0].Fields.DisplayName != "Carol" || w.profileRequests("carol") != 2 {
		t.Fatalf("after the hold-back: %+v, %d requests", ps[0], w.profileRequests("carol"))
	}
	if got := testutil.ToFloat64(w.svc.metrics.fetches.WithLabelValues("pds_error")); got != 1 {
		t.Errorf("pds_error fetches = %v", got)
	}
}

// A stored profile whose handle was forgotten (an identity event) costs
// only a resolution, not a PDS request.
func TestOnlyTheHandleIsRefreshed(t *testing.T) {
	w := newWorld(t, Config{Wait: 5 * time.Second}, "carol")
	w.profileRecord("carol", "Carol")
	w.hydrate(t, "carol")
	if _, err := w.store.ApplyBatch(context.Background(), &feeds.Batch{Identities: []syntax.DID{did("carol")}, Cursor: feeds.StreamCursor{TimeUS: 200}}); err != nil {
		t.Fatal(err)
	}
	if ps, _ := w.store.Profiles(context.Background(), []syntax.DID{did("carol")}); ps[0].HandleKnown {
		t.Fatalf("handle kept after an identity event: %+v", ps[0])
	}
	ps, _ := w.hydrate(t, "carol")
	if !ps[0].Complete() || ps[0].Fields.DisplayName != "Carol" || w.profileRequests("carol") != 1 {
		t.Fatalf("after identity event: %+v, %d requests", ps[0], w.profileRequests("carol"))
	}
	if got := testutil.ToFloat64(w.svc.metrics.fetches.WithLabelValues("handle_only")); got != 1 {
		t.Errorf("handle_only fetches = %v", got)
	}
}

// A full queue drops the fetch; the read answers without the profile.
func TestFullQueueDropsTheFetch(t *testing.T) {
	w := newWorld(t, Config{Wait: 50 * time.Millisecond, QueueSize: 1, Concurrency: 1}, "carol", "dave", "erin")
	for _, n := range []string{"carol", "dave", "erin"} {
		w.profileRecord(n, n)
		w.pds.FailN(did(n), feeds.ProfileCollection, pdstest.FaultDelayed, 1)
	}
	ps, _ := w.hydrate(t, "carol", "dave", "erin")
	for _, p := range ps {
		if p.Known {
			t.Fatalf("answered with %+v within 50ms", p)
		}
	}
	if got := testutil.ToFloat64(w.svc.metrics.fetches.WithLabelValues("queue_full")); got < 1 {
		t.Errorf("queue_full = %v", got)
	}
}

// A handle that could not be checked (the resolver down for a moment) is
// not stored as missing: it stays unknown, and a later read, once the
// failure is no longer cached, finds it.
func TestAHandleThatCouldNotBeCheckedIsAskedAgain(t *testing.T) {
	w := newWorld(t, Config{Wait: 5 * time.Second, RetryAfter: time.Minute}, "carol")
	w.profileRecord("carol", "Carol")
	w.plc.FailHandles(1)
	if ps, _ := w.hydrate(t, "carol"); ps[0].HandleKnown || ps[0].Fields.DisplayName != "Carol" {
		t.Fatalf("after the resolver failed: %+v, want the record and no handle known", ps[0])
	}
	w.clock.Advance(3 * time.Minute) // past the fetch's retry and the directory's error TTL
	if ps, _ := w.hydrate(t, "carol"); !ps[0].Complete() || ps[0].Handle != "carol.test" {
		t.Fatalf("a later read: %+v, want the handle carol.test", ps[0])
	}
}

// A handle that could not be checked is held back like any failed fetch:
// reads within RetryAfter queue no job for it and wait for none.
func TestAHandleThatCouldNotBeCheckedIsHeldBack(t *testing.T) {
	w := newWorld(t, Config{Wait: 5 * time.Second, RetryAfter: 10 * time.Minute}, "carol")
	w.profileRecord("carol", "Carol")
	w.plc.FailHandles(1)
	w.hydrate(t, "carol") // fetches the record; the handle fails
	for range 3 {
		w.hydrate(t, "carol")
	}
	fetches := 0.0
	for _, o := range outcomes {
		fetches += testutil.ToFloat64(w.svc.metrics.fetches.WithLabelValues(string(o)))
	}
	if fetches != 1 {
		t.Fatalf("%v fetches of carol within RetryAfter, want 1", fetches)
	}
	w.clock.Advance(11 * time.Minute)
	if ps, _ := w.hydrate(t, "carol"); ps[0].Handle != "carol.test" {
		t.Fatalf("a read after RetryAfter: %+v, want the handle carol.test", ps[0])
	}
}

// slowStore holds every profile write until its deadline, as a write lock
// held by a long batch would.
type slowStore struct{ *feeds.Store }

func (s slowStore) StoreFetchedProfile(ctx context.Context, _ feeds.FetchedProfile) error {
	<-ctx.Done()
	return fmt.Errorf("begin write: %w", ctx.Err())
}

// A profile write that times out waiting for the write lock fails the
// fetch, not the service: Run goes on (newWorld's cleanup fails the test
// if Run returned an error) and the next read fetches again.
func TestAProfileWriteTimingOutFailsOnlyTheFetch(t *testing.T) {
	w := newWorldWith(t, func(s *feeds.Store) Store { return slowStore{s} },
		Config{Wait: 50 * time.Millisecond, StoreTimeout: 100 * time.Millisecond}, "carol")
	w.profileRecord("carol", "Carol")
	w.hydrate(t, "carol")
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(w.svc.metrics.fetches.WithLabelValues("stored")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the fetch never finished")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The next read, past any wait a failure sets, fetches again: the
	// failed job was finished, not left pending for good (a test review
	// found this half unchecked).
	w.clock.Advance(time.Hour)
	w.hydrate(t, "carol")
	for w.profileRequests("carol") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the next read did not fetch again (%d requests)", w.profileRequests("carol"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An operator command beside the daemon (appview backfill, rebuild)
// holding the write lock past SQLite's busy timeout made a fetch's write
// fail with feeds.ErrWriteBusy, which Run returned as the database being
// broken: the daemon stopped. Only the fetch fails, and is tried again.
func TestAProfileWriteBehindAForeignWriteLockFailsOnlyTheFetch(t *testing.T) {
	w := newWorld(t, Config{Wait: 50 * time.Millisecond}, "carol")
	w.profileRecord("carol", "Carol")
	release := writelock.Hold(t, w.path)
	w.hydrate(t, "carol")
	deadline := time.Now().Add(15 * time.Second)
	for testutil.ToFloat64(w.svc.metrics.fetches.WithLabelValues("stored")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the fetch never finished")
		}
		time.Sleep(50 * time.Millisecond)
	}
	release()
	if p := readStored(t, w, "carol"); p.Known {
		t.Fatalf("stored behind the lock: %+v", p)
	}
	// Past the failure's hold, a read fetches and stores carol: the
	// service is still running.
	w.clock.Advance(time.Hour)
	for {
		ps, _ := w.hydrate(t, "carol")
		if ps[0].Present && ps[0].Fields.DisplayName == "Carol" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reads after the lock was released = %+v: the service stopped fetching", ps[0])
		}
	}
}

func readStored(t *testing.T, w *world, name string) feeds.Profile {
	t.Helper()
	ps, err := w.store.Profiles(context.Background(), []syntax.DID{did(name)})
	if err != nil {
		t.Fatal(err)
	}
	return ps[0]
}

// A handle can stop verifying without an identity event (its DNS record
// changed), or its event can be lost in a gap: once older than HandleTTL a
// stored handle is still answered at once, and verified again behind the
// read, so a later read has the new one.
func TestAnOldHandleIsVerifiedAgain(t *testing.T) {
	w := newWorld(t, Config{Wait: 5 * time.Second, HandleTTL: time.Hour}, "carol")
	w.profileRecord("carol", "Carol")
	if ps, _ := w.hydrate(t, "carol"); ps[0].Handle != "carol.test" {
		t.Fatalf("first read: %+v", ps[0])
	}
	w.plc.Add(did("carol"), "carol.example", w.pds.URL())
	w.clock.Advance(30 * time.Minute)
	w.hydrate(t, "carol")
	if got := testutil.ToFloat64(w.svc.metrics.fetches.WithLabelValues("handle_only")); got != 0 {
		t.Fatalf("a handle younger than its TTL was fetched again (%v)", got)
	}
	w.clock.Advance(2 * time.Hour) // past the TTL and the directory's cache
	ps, _ := w.hydrate(t, "carol")
	if ps[0].Handle != "carol.test" {
		t.Fatalf("the read past the TTL answered %+v, want the stored handle at once", ps[0])
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := w.store.Profiles(context.Background(), []syntax.DID{did("carol")})
		if err != nil {
			t.Fatal(err)
		}
		if got[0].Handle == "carol.example" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the handle was not verified again: %+v", got[0])
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := w.profileRequests("carol"); n != 1 {
		t.Errorf("the refresh fetched the profile record again (%d requests)", n)
	}
}

// A PDS that hangs is limited to PerHost fetches at once, so that the
// other hosts' accounts still get the rest of the fetcher. A worker that
// took a job of the hanging host while its slots were taken waited for
// one, up to the fetch timeout: a page of that host's accounts held every
// worker, and an account of a healthy host read behind it was answered
// without its profile for as long as the host's jobs lasted. The jobs that
// waited also counted as failed fetches, though their PDS was never asked.
// Jobs wait for the host's slots parked, without a worker, at most
// maxParkedPerSlot per slot: past that they are dropped like a full
// queue's, so that the host's accounts do not fill the queue's bound.
func TestAHangingPDSHoldsOnlyItsShareOfTheFetcher(t *testing.T) {
	var mu sync.Mutex
	asked := map[string]bool{}
	hanging := hangingPDS(t, func(r *http.Request) {
		mu.Lock()
		asked[r.URL.Query().Get("repo")] = true
		mu.Unlock()
	})

	slow := moreThanParkFor(2)
	w := newWorld(t, Config{Wait: time.Second, Concurrency: 4, PerHost: 2, FetchTimeout: 4 * time.Second},
		append([]string{"carol"}, slow...)...)
	w.profileRecord("carol", "Carol")
	for _, n := range slow {
		w.plc.Add(did(n), syntax.Handle(n+".test"), hanging.URL)
	}
	w.svc.cfg.Wait = 10 * time.Millisecond
	w.hydrate(t, slow...) // a page of the hanging host's accounts
	// 2 asked, 16 parked, 6 dropped.
	deadline := time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(w.svc.metrics.fetches.WithLabelValues("queue_full")) < 6 {
		if time.Now().After(deadline) {
			t.Fatalf("%v dropped, want 6", testutil.ToFloat64(w.svc.metrics.fetches.WithLabelValues("queue_full")))
		}
		time.Sleep(20 * time.Millisecond)
	}
	w.svc.cfg.Wait = time.Second
	ps, took := w.hydrate(t, "carol")
	if !ps[0].Present || ps[0].Fields.DisplayName != "Carol" {
		t.Fatalf("carol, on a healthy PDS, read after a page of a hanging PDS's accounts: %+v after %v", ps[0], took)
	}
	if got := testutil.ToFloat64(w.svc.metrics.fetches.WithLabelValues("queue_full")); got != 6 {
		t.Errorf("%v dropped, want 6", got)
	}
	// The accounts whose PDS was never asked are not held back as failed.
	deadline = time.Now().Add(15 * time.Second)
	for testutil.ToFloat64(w.svc.metrics.fetches.WithLabelValues("pds_error")) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the hanging host's fetches never timed out")
		}
		time.Sleep(50 * time.Millisecond)
	}
	w.svc.mu.Lock()
	defer w.svc.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	for d := range w.svc.failed {
		if !asked[d.String()] {
			t.Errorf("%s is held back as failed, but its PDS was never asked", d)
		}
	}
}

// A job parked behind a host's requests may not take the slot it is woken
// for: its DID no longer resolves, or now names another host. The jobs
// parked behind it must still run.
func TestJobsParkedBehindAJobThatLeftItsHostStillRun(t *testing.T) {
	hanging := hangingPDS(t, nil)
	w := newWorld(t, Config{Wait: 10 * time.Millisecond, Concurrency: 2, PerHost: 1, FetchTimeout: time.Second},
		"slow", "moved", "gone", "last")
	for _, n := range []string{"slow", "moved", "gone", "last"} {
		w.plc.Add(did(n), syntax.Handle(n+".test"), hanging.URL)
	}
	w.profileRecord("moved", "Moved")
	w.profileRecord("last", "Last")
	w.hydrate(t, "slow") // hangs
	time.Sleep(100 * time.Millisecond)
	w.hydrate(t, "moved", "gone", "last") // parked behind it
	time.Sleep(100 * time.Millisecond)
	// While they wait: moved goes to the healthy PDS, gone out of PLC,
	// and last's PDS recovers.
	w.plc.Add(did("moved"), "moved.test", w.pds.URL())
	w.plc.Add(did("last"), "last.test", w.pds.URL())
	w.plc.Tombstone(did("gone"))
	w.clock.Advance(2 * time.Hour) // past the directory's cache
	deadline := time.Now().Add(10 * time.Second)
	for {
		ps, _ := w.hydrate(t, "moved", "last")
		if ps[0].Present && ps[1].Present {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("parked jobs never ran: %+v", ps)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A job woken for its host's slot that now names another host hands the
// slot on as it takes the other host's; the job the slot went to ran
// only after the moved job's request, on the same worker, however long
// that took: a hanging PDS held the slot of a healthy one, and the
// healthy host's accounts parked behind it waited the fetch timeout
// while other workers were idle.
func TestASlotHandedOnByAMovedJobIsNotHeldBehindItsRequest(t *testing.T) {
	releaseSlow := make(chan struct{})
	hanging := hangingPDS(t, nil)
	const timeout = 4 * time.Second
	w := newWorld(t, Config{Wait: 10 * time.Millisecond, Concurrency: 4, PerHost: 1, FetchTimeout: timeout},
		"slow", "moved", "next")
	w.profileRecord("next", "Next")
	target, err := url.Parse(w.pds.URL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	// Host A: the healthy PDS, but slow's request hangs until released.
	hostA := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("repo") == did("slow").String() {
			select {
			case <-releaseSlow:
			case <-r.Context().Done():
				return
			}
		}
		proxy.ServeHTTP(rw, r)
	}))
	t.Cleanup(hostA.Close)
	for _, n := range []string{"slow", "moved", "next"} {
		w.plc.Add(did(n), syntax.Handle(n+".test"), hostA.URL)
	}
	w.hydrate(t, "slow") // takes host A's only slot
	time.Sleep(100 * time.Millisecond)
	w.hydrate(t, "moved") // parked behind it
	time.Sleep(100 * time.Millisecond)
	w.hydrate(t, "next") // parked behind moved
	time.Sleep(100 * time.Millisecond)
	// moved goes to a hanging PDS while it waits.
	w.plc.Add(did("moved"), "moved.test", hanging.URL)
	w.clock.Advance(2 * time.Hour) // past the directory's cache
	close(releaseSlow)
	// slow's request ends and its slot goes to moved, which hands it on
	// to next as it takes the hanging host's: next, on a healthy host,
	// with three workers idle, is fetched at once.
	deadline := time.Now().Add(timeout / 2)
	for !readStored(t, w, "next").Present {
		if time.Now().After(deadline) {
			t.Fatalf("next, parked on a healthy host, not fetched %v after its slot was free: held behind the moved job's hanging request", timeout/2)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// countingStore counts profile writes.
type countingStore struct {
	*feeds.Store
	mu     *sync.Mutex
	writes map[syntax.DID]int
}

func (s countingStore) StoreFetchedProfile(ctx context.Context, p feeds.FetchedProfile) error {
	s.mu.Lock()
	s.writes[p.DID]++
	s.mu.Unlock()
	return s.Store.StoreFetchedProfile(ctx, p)
}

// A job dropped because too many are parked behind its hanging PDS is
// dropped like a full queue's: it stores nothing. It wrote the handle it
// had verified, and, not held back, each read of the page dropped and
// wrote each such account again: a write transaction per account per
// read for as long as the PDS hung.
func TestAJobDroppedBehindAHangingPDSWritesNothing(t *testing.T) {
	hanging := hangingPDS(t, nil)
	slow := moreThanParkFor(2)
	var mu sync.Mutex
	writes := map[syntax.DID]int{}
	w := newWorldWith(t, func(s *feeds.Store) Store { return countingStore{s, &mu, writes} },
		Config{Wait: 10 * time.Millisecond, Concurrency: 4, PerHost: 2, FetchTimeout: 10 * time.Second}, slow...)
	for _, n := range slow {
		w.plc.Add(did(n), syntax.Handle(n+".test"), hanging.URL)
	}
	dropped := func() float64 { return testutil.ToFloat64(w.svc.metrics.fetches.WithLabelValues("queue_full")) }
	for round := 1; round <= 5; round++ {
		w.hydrate(t, slow...)
		deadline := time.Now().Add(5 * time.Second)
		for dropped() < float64(6*round) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %v dropped", round, dropped())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, n := range writes {
		total += n
	}
	if total != 0 {
		t.Fatalf("%d profile writes while every request of the page hung (%v), want none", total, writes)
	}
}

// hangingPDS is a PDS that answers nothing until the test ends (each
// request seen by saw first, when not nil).
func hangingPDS(t *testing.T, saw func(*http.Request)) *httptest.Server {
	t.Helper()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if saw != nil {
			saw(r)
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	return srv
}

// moreThanParkFor names more accounts than a host of perHost slots runs
// and parks: its slots, maxParkedPerSlot a slot, and 6 over.
func moreThanParkFor(perHost int) []string {
	var names []string
	for i := range perHost + maxParkedPerSlot*perHost + 6 {
		names = append(names, fmt.Sprintf("slow%d", i))
	}
	return names
}

// hangingPage is a page of n accounts on a new hanging PDS, whose
// requests are counted in asked.
func hangingPage(t *testing.T, w *world, prefix string, n int, asked *atomic.Int32) []string {
	t.Helper()
	hanging := hangingPDS(t, func(*http.Request) { asked.Add(1) })
	var names []string
	for i := range n {
		name := fmt.Sprintf("%s%d", prefix, i)
		w.plc.Add(did(name), syntax.Handle(name+".test"), hanging.URL)
		names = append(names, name)
	}
	return names
}

// waitAsked waits until asked reaches want.
func waitAsked(t *testing.T, asked *atomic.Int32, want int32) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for asked.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests reached the hanging PDS, want %d", asked.Load(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Two hanging PDSes at the defaults (4 workers, 2 a host) had every
// worker in their requests, and each worker whose request timed out ran
// the next job parked there: a healthy PDS's accounts waited until the
// hanging hosts' parked jobs drained (about 80 s at a 10 s fetch
// timeout). A worker whose request runs past slowRequest is stood in for
// by another, so the hanging hosts hold their slots but not the fetcher.
func TestTwoHangingPDSesDoNotHoldTheFetcher(t *testing.T) {
	const timeout = 6 * time.Second
	w := newWorld(t, Config{Wait: 10 * time.Millisecond, Concurrency: 4, PerHost: 2, FetchTimeout: timeout}, "carol")
	w.profileRecord("carol", "Carol")
	var askedA, askedB atomic.Int32
	pageA := hangingPage(t, w, "a", 6, &askedA)
	pageB := hangingPage(t, w, "b", 6, &askedB)
	w.hydrate(t, pageA...)
	w.hydrate(t, pageB...)
	waitAsked(t, &askedA, 2)
	waitAsked(t, &askedB, 2)
	start := time.Now()
	w.svc.cfg.Wait = timeout / 2
	ps, took := w.hydrate(t, "carol")
	if !ps[0].Present || ps[0].Fields.DisplayName != "Carol" {
		t.Fatalf("carol, on a healthy PDS, not fetched within %v while two PDSes hang: %+v", took, ps[0])
	}
	if took := time.Since(start); took > slowRequest+time.Second {
		t.Errorf("carol fetched after %v, want about %v", took, slowRequest)
	}
	// Each hanging host still has at most its 2 slots asked.
	if a, b := askedA.Load(), askedB.Load(); a > 2 || b > 2 {
		t.Errorf("hanging hosts asked %d and %d times before their first timeout, want 2 each", a, b)
	}
}

// With a queue_size of 1, jobs parked behind one hanging PDS counted
// against the pending bound (queue size plus workers), so a few of them
// dropped every other account's fetch as if the queue were full. Parked
// jobs have their own bound now, apart from the queue's.
func TestAHangingPDSDoesNotFillASmallQueue(t *testing.T) {
	w := newWorld(t, Config{Wait: 10 * time.Millisecond, QueueSize: 1, Concurrency: 4, PerHost: 2, FetchTimeout: 6 * time.Second}, "carol")
	w.profileRecord("carol", "Carol")
	var asked atomic.Int32
	page := hangingPage(t, w, "slow", 8, &asked)
	// The queue holds one job at a time, so a read may get only one of
	// the page's jobs in before the workers take it (a loaded machine):
	// read again until both of the host's slots are in requests.
	deadline := time.Now().Add(5 * time.Second)
	for asked.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests reached the hanging PDS, want 2", asked.Load())
		}
		w.hydrate(t, page...)
		time.Sleep(20 * time.Millisecond)
	}
	for range 5 { // park what it can
		w.hydrate(t, page...)
		time.Sleep(20 * time.Millisecond)
	}
	w.svc.cfg.Wait = 2 * time.Second
	ps, took := w.hydrate(t, "carol")
	if !ps[0].Present {
		t.Fatalf("carol, on a healthy PDS, not fetched within %v (%v dropped as queue_full)", took,
			testutil.ToFloat64(w.svc.metrics.fetches.WithLabelValues("queue_full")))
	}
}

// A directory that did not ask (its PLC paused us with a 429, or too many
// lookups were in flight) says nothing about the account: the fetch
// stores nothing and is not held back, so the next read after the pause
// fetches the profile. It was counted an identity error and held back
// for RetryAfter, so our own load hid profiles for minutes (a review).
func TestABusyDirectoryDoesNotHoldAProfileBack(t *testing.T) {
	w := newWorld(t, Config{Wait: 5 * time.Second, RetryAfter: time.Hour}, "carol")
	w.profileRecord("carol", "Carol")
	w.plc.LimitDocuments(1, "5")

	if ps, _ := w.hydrate(t, "carol"); ps[0].Known {
		t.Fatalf("with the PLC limiting us: %+v", ps[0])
	}
	if got := testutil.ToFloat64(w.svc.metrics.fetches.WithLabelValues("identity_busy")); got != 1 {
		t.Errorf("identity_busy fetches = %v, want 1", got)
	}
	w.clock.Advance(5 * time.Second) // the pause's end, not the hour of a failure's hold-back
	if ps, _ := w.hydrate(t, "carol"); ps[0].Fields.DisplayName != "Carol" {
		t.Fatalf("after the pause: %+v, want carol's profile", ps[0])
	}
	if got := testutil.ToFloat64(w.svc.metrics.fetches.WithLabelValues("identity_error")); got != 0 {
		t.Errorf("identity_error fetches = %v, want 0", got)
	}
}

// A caller whose context ends during the wait (getFeed's deadline) still
// gets the profiles that arrived: they were read again from the store
// under that ended context, which failed the whole hydration, and
// getFeed answered 503 for a page that was ready (a review).
func TestProfilesThatArrivedAreAnsweredWhenTheCallersContextEnds(t *testing.T) {
	w := newWorld(t, Config{Wait: 2 * time.Second, FetchTimeout: 6 * time.Second}, "carol")
	w.profileRecord("carol", "Carol")
	var asked atomic.Int32
	slow := hangingPage(t, w, "slow", 1, &asked)
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	ps, err := w.svc.Hydrate(ctx, []syntax.DID{did("carol"), did(slow[0])})
	if err != nil {
		t.Fatalf("hydrate: %v", err)
	}
	if ps[0].Fields.DisplayName != "Carol" || ps[1].Known {
		t.Fatalf("profiles %+v, want carol's, and the hanging account's missing", ps)
	}
}
