package appview

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/atfeeds/appview/directory"
	"github.com/atfeeds/appview/egress"
	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/internal/syncbuf"
	"github.com/atfeeds/appview/pds"
	"github.com/atfeeds/appview/pds/pdstest"
	"github.com/atfeeds/appview/xrpc"
)

type fixedResolver struct{ pds string }

func (r fixedResolver) LookupDID(_ context.Context, did syntax.DID) (*directory.Identity, error) {
	return &directory.Identity{DID: did, PDS: r.pds}, nil
}

// newTestNotifier is a notifier on a fresh index_all store whose every
// account's PDS is pdsURL.
func newTestNotifier(t *testing.T, pdsURL string, log *slog.Logger) *notifier {
	t.Helper()
	store, err := feeds.Open(context.Background(), feeds.Options{Path: t.TempDir() + "/appview.db", IndexAll: true,
		Feeds: []feeds.Feed{{Name: "following", FollowCollection: followNSID, Targets: []feeds.Target{{Collection: postNSID, Cap: 10}}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	httpc := egress.NewClient(egress.Options{AllowPrivateNetworks: true, Timeout: 5 * time.Second})
	return &notifier{
		store: store, resolver: fixedResolver{pds: pdsURL},
		pds:      pds.NewClient(httpc, pds.Options{Timeout: 5 * time.Second}),
		limits:   pds.NewLimiter(notifyGlobal, notifyPerHost),
		paused:   pds.NewHostPauses(),
		follows:  map[syntax.NSID]bool{followNSID: true},
		log:      log,
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "test_outcomes"}, []string{"outcome"}),
		now:      time.Now,
	}
}

// Parallel notifyOfUpdate calls for records on one PDS share its request
// slots: however many calls arrive, no more than notifyPerHost getRecord
// requests reach the host at once.
func TestNotifyBoundsRequestsPerPDSAcrossCalls(t *testing.T) {
	var inFlight, most atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(20 * time.Millisecond)
		answerPost(w, r)
	}))
	t.Cleanup(srv.Close)

	n := newTestNotifier(t, srv.URL, slog.New(slog.DiscardHandler))
	var wg sync.WaitGroup
	for c := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var uris []syntax.ATURI
			for i := range notifyConcurrency {
				uris = append(uris, syntax.ATURI(fmt.Sprintf("at://did:plc:author%d/%s/3kaaaaaaaaa%02d", c, postNSID, i)))
			}
			res, err := n.NotifyOfUpdate(context.Background(), uris)
			if err != nil || len(res.Errors) != 0 || len(res.Indexed) != len(uris) {
				t.Errorf("call %d: %+v, %v", c, res, err)
			}
		}()
	}
	wg.Wait()
	if m := most.Load(); m > notifyPerHost {
		t.Errorf("%d getRecord requests reached the PDS at once, want at most %d", m, notifyPerHost)
	}
}

// A record a PDS answers that is not what was asked for (here another
// $type) is refused as InvalidRecord, counted, and said once in the log
// (found by a review: it was counted but never logged).
func TestNotifyLogsABadUpstreamRecord(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		uri := fmt.Sprintf("at://%s/%s/%s", q.Get("repo"), q.Get("collection"), q.Get("rkey"))
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"uri":%q,"cid":%q,"value":{"$type":"app.bsky.feed.like","createdAt":"2026-01-01T00:00:00Z"}}`,
			uri, pdstest.FakeCID([]byte(uri)))
	}))
	t.Cleanup(srv.Close)
	var logs syncbuf.Buffer
	n := newTestNotifier(t, srv.URL, slog.New(slog.NewTextHandler(&logs, nil)))
	const uri = "at://did:plc:carol/app.bsky.feed.post/3kaaaaaaaaa22"
	res, err := n.NotifyOfUpdate(context.Background(), []syntax.ATURI{uri})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Errors) != 1 || res.Errors[0].Error != xrpc.NotifyErrInvalidRecord {
		t.Fatalf("result %+v, want one InvalidRecord", res)
	}
	if got := testutil.ToFloat64(n.outcomes.WithLabelValues("invalid_record")); got != 1 {
		t.Errorf("invalid_record counted %v times, want 1", got)
	}
	if line := logs.String(); !strings.Contains(line, "notified record not indexed") || !strings.Contains(line, uri) ||
		strings.Count(line, "\n") != 1 {
		t.Errorf("log = %q, want one line naming the record", line)
	}
}

// hostResolver names the PDS of each DID starting with a prefix.
type hostResolver map[string]string

func (r hostResolver) LookupDID(_ context.Context, did syntax.DID) (*directory.Identity, error) {
	for prefix, pdsURL := range r {
		if strings.HasPrefix(did.String(), prefix) {
			return &directory.Identity{DID: did, PDS: pdsURL}, nil
		}
	}
	return nil, directory.ErrNotFound
}

// A call's records on a hanging PDS took the call's fetch slots
// (notifyConcurrency) as they waited for that host's request slots
// (notifyPerHost), so the call's records on healthy PDSes waited for
// a fetch slot until the call's fetch time ran out. A record waits for
// its host's slot without holding one of the call's.
func TestNotifyRecordsOnAHealthyPDSAreNotHeldBehindAHangingOne(t *testing.T) {
	release := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hanging.Close)
	var releaseOnce sync.Once
	unhang := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unhang)
	var healthyAsked atomic.Int32
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		healthyAsked.Add(1)
		answerPost(w, r)
	}))
	t.Cleanup(healthy.Close)

	n := newTestNotifier(t, healthy.URL, slog.New(slog.DiscardHandler))
	n.resolver = hostResolver{"did:plc:hang": hanging.URL, "did:plc:ok": healthy.URL}
	// 25 URIs (the most a call takes): more on the hanging PDS than the
	// call's fetch slots, then 8 on the healthy one.
	var uris []syntax.ATURI
	for i := range 17 {
		uris = append(uris, syntax.ATURI(fmt.Sprintf("at://did:plc:hang%d/%s/3kaaaaaaaaa%02d", i, postNSID, i)))
	}
	var want []string
	for i := range notifyConcurrency {
		u := fmt.Sprintf("at://did:plc:ok%d/%s/3kaaaaaaaaa%02d", i, postNSID, i)
		uris, want = append(uris, syntax.ATURI(u)), append(want, u)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type answer struct {
		res xrpc.NotifyResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := n.NotifyOfUpdate(ctx, uris)
		done <- answer{res, err}
	}()
	deadline := time.Now().Add(2 * time.Second)
	for healthyAsked.Load() < notifyConcurrency && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := healthyAsked.Load(); got < notifyConcurrency {
		t.Errorf("the healthy PDS was asked for %d of its %d records within 2 s while another PDS of the call hung", got, notifyConcurrency)
	}
	// The hanging PDS now answers, with nothing: its records fail and the
	// call ends by itself, its healthy records fetched in full (a cancel
	// here could cut off a healthy record whose answer was still being
	// read).
	unhang()
	a := <-done
	if a.err != nil {
		t.Fatal(a.err)
	}
	if !slices.Equal(a.res.Indexed, want) {
		t.Errorf("indexed %v, want the healthy PDS's %v", a.res.Indexed, want)
	}
	if len(a.res.Errors) != 17 {
		t.Errorf("%d errors, want the hanging PDS's 17", len(a.res.Errors))
	}
}

// A call whose fetch slots were all in requests to two hanging PDSes had
// its records on a healthy PDS take that host's request slots
// (notifyPerHost, shared by every call) and hold them, idle, while they
// waited for a fetch slot of their own call: another call's record on
// the healthy PDS then waited for a host slot until the first call's
// fetch time (9 s) ran out. A record holds no host slot while it waits
// for one of its call's.
func TestNotifyACallWaitingForItsSlotsHoldsNoHostSlotOfAnother(t *testing.T) {
	release := make(chan struct{})
	var releaseOnce sync.Once
	unhang := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unhang)
	var hangingAsked atomic.Int32
	hangingPDS := func() *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hangingAsked.Add(1)
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	x, y := hangingPDS(), hangingPDS()
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if strings.HasPrefix(q.Get("repo"), "did:plc:ok") {
			time.Sleep(100 * time.Millisecond) // the first call's records take a while
		}
		answerPost(w, r)
	}))
	t.Cleanup(healthy.Close)

	n := newTestNotifier(t, healthy.URL, slog.New(slog.DiscardHandler))
	n.resolver = hostResolver{"did:plc:x": x.URL, "did:plc:y": y.URL, "did:plc:ok": healthy.URL, "did:plc:other": healthy.URL}
	// The first call: notifyPerHost records on each hanging PDS, which
	// take all of its notifyConcurrency fetch slots, and the rest of its
	// 25 on the healthy one.
	var uris []syntax.ATURI
	for i := range notifyPerHost {
		uris = append(uris,
			syntax.ATURI(fmt.Sprintf("at://did:plc:x%d/%s/3kaaaaaaaaa%02d", i, postNSID, i)),
			syntax.ATURI(fmt.Sprintf("at://did:plc:y%d/%s/3kaaaaaaaaa%02d", i, postNSID, i)))
	}
	for i := len(uris); i < 25; i++ {
		uris = append(uris, syntax.ATURI(fmt.Sprintf("at://did:plc:ok%d/%s/3kaaaaaaaaa%02d", i, postNSID, i)))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := make(chan error, 1)
	go func() {
		_, err := n.NotifyOfUpdate(ctx, uris)
		first <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for hangingAsked.Load() < 2*notifyPerHost {
		if time.Now().After(deadline) {
			t.Fatalf("the hanging PDSes were asked %d times, want %d", hangingAsked.Load(), 2*notifyPerHost)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // the first call's healthy records wait for its slots

	// Another call, for one record on the healthy PDS.
	other := syntax.ATURI(fmt.Sprintf("at://did:plc:other/%s/3kaaaaaaaaa99", postNSID))
	type answer struct {
		res xrpc.NotifyResult
		err error
	}
	second := make(chan answer, 1)
	start := time.Now()
	go func() {
		res, err := n.NotifyOfUpdate(ctx, []syntax.ATURI{other})
		second <- answer{res, err}
	}()
	select {
	case a := <-second:
		if a.err != nil || !slices.Equal(a.res.Indexed, []string{other.String()}) {
			t.Errorf("the second call: %+v, %v; want its record indexed", a.res, a.err)
		}
	case <-time.After(3 * time.Second):
		t.Errorf("the second call's record on a healthy PDS not fetched within %v while the first call's records held that host's slots",
			time.Since(start).Round(time.Millisecond))
	}
	unhang()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

// answerPost answers a getRecord with a post at the URI asked for.
func answerPost(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	uri := fmt.Sprintf("at://%s/%s/%s", q.Get("repo"), q.Get("collection"), q.Get("rkey"))
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"uri":%q,"cid":%q,"value":{"$type":"app.bsky.feed.post","text":"x","createdAt":"2026-01-01T00:00:00Z"}}`,
		uri, pdstest.FakeCID([]byte(uri)))
}
