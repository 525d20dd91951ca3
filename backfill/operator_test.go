package backfill

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/pds/pdstest"
)

func TestRunFirstReadBuildsTheFeedAndReportsProgress(t *testing.T) {
	// A per-client bucket of zero new viewers would refuse any read: the
	// operator's run does not pass through it.
	w := newWorld(t, Config{Admission: AdmissionConfig{PerClientRate: 1e-9, PerClientBurst: 1}})
	viewer := w.account("viewer")
	for i := range 3 {
		acct := w.account(fmt.Sprint("acct", i))
		w.follow(viewer, acct, i)
		w.post(acct, 100+i)
	}
	var mu sync.Mutex
	var seen [][2]int
	res, err := w.svc.RunFirstRead(context.Background(), viewer, "following", func(done, total int) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, [2]int{done, total})
	})
	if err != nil || res.Rows != 3 || res.AlreadyComplete {
		t.Fatalf("first read: %+v, %v; want 3 rows", res, err)
	}
	if len(seen) != 4 || seen[0] != [2]int{0, 3} || seen[3] != [2]int{3, 3} {
		t.Errorf("progress %v, want 0/3 … 3/3", seen)
	}
	if got := w.page(t, viewer, 10); len(got) != 3 {
		t.Errorf("feed = %v", got)
	}
	res, err = w.svc.RunFirstRead(context.Background(), viewer, "following", nil)
	if err != nil || !res.AlreadyComplete {
		t.Errorf("second run: %+v, %v; want already complete", res, err)
	}
	if _, err := w.svc.RunFirstRead(context.Background(), viewer, "nope", nil); err == nil {
		t.Error("unknown feed accepted")
	}
}

// A first read interrupted by its context gives its claim back without
// counting an attempt; the next run goes on from what was committed.
func TestRunFirstReadInterruptedResumes(t *testing.T) {
	w := newWorld(t, Config{Concurrency: 1})
	viewer := w.account("viewer")
	var accts []string
	for i := range 4 {
		acct := w.account(fmt.Sprint("acct", i))
		accts = append(accts, string(acct))
		w.follow(viewer, acct, i)
		w.post(acct, 100+i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	fetched := map[string]int{}
	armed := true
	w.gate.Store(func(r *http.Request) {
		q := r.URL.Query()
		if q.Get("collection") != string(postNSID) {
			return
		}
		mu.Lock()
		fetched[q.Get("repo")]++
		n, interrupt := len(fetched), armed
		mu.Unlock()
		if interrupt && n == 3 {
			cancel() // Ctrl-C while the third followee is in flight
			<-r.Context().Done()
		}
	})
	if _, err := w.svc.RunFirstRead(ctx, viewer, "following", nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run: %v", err)
	}
	if ok, err := w.store.ClaimFirstRead(context.Background(), viewer, "following", "someone-else", w.clock, time.Minute); !ok || err != nil {
		t.Fatalf("the interrupted run kept its claim: %v %v", ok, err)
	}
	if err := w.store.ReleaseFirstRead(context.Background(), viewer, "following", "someone-else"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	armed = false
	mu.Unlock()
	res, err := w.svc.RunFirstRead(context.Background(), viewer, "following", nil)
	if err != nil || res.Rows != 4 {
		t.Fatalf("resumed run: %+v, %v; want 4 rows", res, err)
	}
	// A short page and the empty page that confirms the end.
	if n := w.pds.Requests(viewer, followNSID); n != 2 {
		t.Errorf("the viewer's follows were listed in %d requests, want 2 (complete before the interruption)", n)
	}
	for _, a := range accts {
		mu.Lock()
		n := fetched[a]
		mu.Unlock()
		if n == 0 || n > 2 {
			t.Errorf("%s fetched %d times", a, n)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, n := range fetched {
		total += n
	}
	if total != 5 {
		t.Errorf("%d followee fetches over both runs, want 5: the two done before the interruption are not fetched again", total)
	}
}

func TestRunFirstReadRefusesWhatIsNotDueOrRunning(t *testing.T) {
	w := newWorld(t, Config{RetryBase: time.Minute})
	viewer := w.account("viewer")
	w.pds.Fail(viewer, followNSID, pdstest.FaultStatus500)
	if _, err := w.svc.RunFirstRead(context.Background(), viewer, "following", nil); err == nil {
		t.Fatal("a failing PDS gave a successful first read")
	}
	_, err := w.svc.RunFirstRead(context.Background(), viewer, "following", nil)
	if !errors.Is(err, ErrNotDue) {
		t.Fatalf("second run before the retry time: %v, want ErrNotDue", err)
	}

	other := w.account("other")
	if _, err := w.store.RegisterViewer(context.Background(), other, "following", w.clock); err != nil {
		t.Fatal(err)
	}
	if ok, _ := w.store.ClaimFirstRead(context.Background(), other, "following", "a-daemon", w.clock, time.Minute); !ok {
		t.Fatal("claim failed")
	}
	if _, err := w.svc.RunFirstRead(context.Background(), other, "following", nil); !errors.Is(err, ErrClaimedElsewhere) {
		t.Fatalf("run while a daemon holds the claim: %v, want ErrClaimedElsewhere", err)
	}
}

// An operator's run longer than the claim's lease (it has no run timeout)
// keeps renewing its claim, so another process cannot take the viewer
// over meanwhile, and the run completes rather than ending in
// ErrClaimLost.
func TestALongRunKeepsItsClaim(t *testing.T) {
	const lease = 300 * time.Millisecond
	longRunKeepsItsClaim(t, newWorld(t, Config{Lease: lease}), lease, func() {})
}

// A renewal that fails (the database locked past its busy timeout by
// another process, say) leaves the claim held: the run keeps renewing it,
// so the claim does not lapse and the run completes rather than ending in
// ErrClaimLost.
func TestALongRunKeepsItsClaimPastAFailedRenewal(t *testing.T) {
	const lease = 300 * time.Millisecond
	w := newWorld(t, Config{Lease: lease})
	failed := make(chan struct{})
	var failOnce atomic.Bool
	renew := w.svc.renew
	w.svc.renew = func(ctx context.Context, viewer syntax.DID, feed, owner string, now time.Time, lease time.Duration) (bool, error) {
		if failOnce.CompareAndSwap(false, true) {
			close(failed)
			return false, errors.New("database is locked")
		}
		return renew(ctx, viewer, feed, owner, now, lease)
	}
	// The lease runs out on the clock after the failed renewal.
	longRunKeepsItsClaim(t, w, lease, func() { <-failed })
}

// longRunKeepsItsClaim holds a first read at the viewer's follows listing,
// waits for held, moves the clock ten leases on, and checks that the run
// renews its claim past that, that no other process can take it, and
// that the run completes with the feed built.
func longRunKeepsItsClaim(t *testing.T, w *world, lease time.Duration, held func()) {
	t.Helper()
	viewer := w.account("viewer")
	acct := w.account("acct")
	w.follow(viewer, acct, 1)
	w.post(acct, 2)
	blocked, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	w.gate.Store(func(r *http.Request) {
		if r.URL.Query().Get("repo") == string(viewer) {
			once.Do(func() { close(blocked); <-release })
		}
	})
	done := make(chan error, 1)
	go func() {
		_, err := w.svc.RunFirstRead(context.Background(), viewer, "following", nil)
		done <- err
	}()
	<-blocked
	held()
	now := w.advance(10 * lease)
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := w.store.RegisterViewer(context.Background(), viewer, "following", now)
		if err != nil {
			t.Fatal(err)
		}
		if st.ClaimUntil.After(now) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("claim %s held until %v, past at %v: not renewed", st.ClaimOwner, st.ClaimUntil, now)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ok, err := w.store.ClaimFirstRead(context.Background(), viewer, "following", "other", now, lease); ok || err != nil {
		t.Fatalf("another process took the claim over: %v %v", ok, err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if got := w.page(t, viewer, 10); len(got) != 1 {
		t.Errorf("feed = %v, want the followee's post", got)
	}
}
