package profiles

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/pds/pdstest"
)

// fetchesBy is the count of fetches that ended with outcome o.
func (w *world) fetchesBy(o outcome) float64 {
	return testutil.ToFloat64(w.svc.metrics.fetches.WithLabelValues(string(o)))
}

// fetchesEnded is the count of fetches that ended, however.
func (w *world) fetchesEnded() float64 {
	n := 0.0
	for _, o := range outcomes {
		n += w.fetchesBy(o)
	}
	return n
}

// A PDS that answers 429 is rate limiting us, not one account. The
// fetcher held back only the account whose request met the limit, and
// asked the host at once for every other account on it, each meeting
// the limit in turn. The host is paused until the time it gave
// (pdstest's Retry-After: 7), as the backfill and notifyOfUpdate pause
// it: its other accounts are not asked, the read answers at once
// without their profiles, each is held back until the pause ends and
// fetched after it, and an account on another host is fetched as usual.
func TestAHostThatAnswered429IsNotAskedUntilItsPauseEnds(t *testing.T) {
	const wait = 5 * time.Second
	w := newWorld(t, Config{Wait: wait, RetryAfter: time.Hour}, "carol", "dave", "erin", "frank")
	other := pdstest.NewServer()
	t.Cleanup(other.Close)
	w.plc.Add(did("frank"), "frank.test", other.URL())
	other.AddRepo(did("frank"))
	other.AddRecord(did("frank"), feeds.ProfileCollection, feeds.ProfileRKey, `{"$type":"app.bsky.actor.profile","displayName":"Frank"}`)
	for _, n := range []string{"carol", "dave", "erin"} {
		w.profileRecord(n, n)
	}
	w.pds.FailN(did("carol"), feeds.ProfileCollection, pdstest.FaultRateLimited, 1)

	if ps, _ := w.hydrate(t, "carol"); ps[0].Known || w.profileRequests("carol") != 1 {
		t.Fatalf("the 429: %+v, %d requests", ps[0], w.profileRequests("carol"))
	}

	ps, took := w.hydrate(t, "dave", "erin", "frank")
	if n := w.profileRequests("dave") + w.profileRequests("erin"); n != 0 {
		t.Fatalf("the host that answered 429 was asked %d more times at once", n)
	}
	if ps[0].Known || ps[1].Known || ps[2].Fields.DisplayName != "Frank" {
		t.Fatalf("the page read while the host is paused: %+v", ps)
	}
	if took > wait/2 {
		t.Errorf("the page read took %v with a %v wait: held by the paused host", took, wait)
	}
	if got := w.fetchesBy(outcomeHostPaused); got != 2 {
		t.Errorf("host_paused fetches = %v, want 2", got)
	}

	// Held back until the pause ends, not asked, nor failed again.
	w.clock.Advance(6 * time.Second)
	if ps, _ := w.hydrate(t, "dave", "erin"); ps[0].Known || ps[1].Known || w.fetchesBy(outcomeHostPaused) != 2 {
		t.Fatalf("a read within the pause: %+v, %v host_paused fetches", ps, w.fetchesBy(outcomeHostPaused))
	}
	w.clock.Advance(time.Second)
	ps, _ = w.hydrate(t, "dave", "erin")
	if ps[0].Fields.DisplayName != "dave" || ps[1].Fields.DisplayName != "erin" ||
		w.profileRequests("dave") != 1 || w.profileRequests("erin") != 1 {
		t.Fatalf("a read once the pause is over: %+v, %d and %d requests", ps,
			w.profileRequests("dave"), w.profileRequests("erin"))
	}
}

// Jobs parked behind a request that meets a 429 are not sent: the host
// is paused before that request's slot is handed on, and a job woken
// with the slot finds the pause and hands the slot on unused, so the
// parked jobs drain at once, each held back, without a request.
func TestNoProfileRequestReachesAPausedHostFromParkedJobs(t *testing.T) {
	var asked atomic.Int32
	release := make(chan struct{})
	limited := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if asked.Add(1) == 1 {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		rw.Header().Set("Retry-After", "60")
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(rw, `{"error":"RateLimitExceeded","message":"Rate Limit Exceeded"}`)
	}))
	t.Cleanup(limited.Close)
	const pageSize = 5
	var page []string
	w := newWorld(t, Config{Wait: 10 * time.Millisecond, Concurrency: 4, PerHost: 1, FetchTimeout: 10 * time.Second})
	for i := range pageSize {
		name := "lim" + string(rune('a'+i))
		w.plc.Add(did(name), syntax.Handle(name+".test"), limited.URL)
		page = append(page, name)
	}
	w.hydrate(t, page...)
	waitAsked(t, &asked, 1)
	deadline := time.Now().Add(5 * time.Second)
	for parked := 0; parked < pageSize-1; {
		w.svc.mu.Lock()
		parked = w.svc.parkedJobs
		w.svc.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs parked behind the host's request, want %d", parked, pageSize-1)
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	for w.fetchesEnded() < pageSize {
		if time.Now().After(deadline) {
			t.Fatalf("%v of %d fetches ended", w.fetchesEnded(), pageSize)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := asked.Load(); got != 1 {
		t.Errorf("the host was asked %d times, want 1 (the request that met the 429)", got)
	}
	if got := w.fetchesBy(outcomeHostPaused); got != pageSize-1 {
		t.Errorf("host_paused fetches = %v, want %d", got, pageSize-1)
	}
}

// The account whose own request met the host's 429 is held back only
// for the host's pause (pdstest's Retry-After: 7), as the host's other
// accounts are: the host limited us, the account did nothing wrong.
// It was held back for RetryAfter (an hour here), long after the host
// could be asked again.
func TestTheAccountWhoseRequestMet429WaitsOnlyForThePause(t *testing.T) {
	w := newWorld(t, Config{Wait: 5 * time.Second, RetryAfter: time.Hour}, "carol")
	w.profileRecord("carol", "Carol")
	w.pds.FailN(did("carol"), feeds.ProfileCollection, pdstest.FaultRateLimited, 1)
	if ps, _ := w.hydrate(t, "carol"); ps[0].Known || w.profileRequests("carol") != 1 {
		t.Fatalf("the 429: %+v, %d requests", ps[0], w.profileRequests("carol"))
	}

	w.clock.Advance(6 * time.Second)
	if ps, _ := w.hydrate(t, "carol"); ps[0].Known || w.profileRequests("carol") != 1 {
		t.Fatalf("a read within the pause: %+v, %d requests", ps[0], w.profileRequests("carol"))
	}
	w.clock.Advance(time.Second)
	if ps, _ := w.hydrate(t, "carol"); ps[0].Fields.DisplayName != "Carol" || w.profileRequests("carol") != 2 {
		t.Fatalf("a read once the pause is over: %+v, %d requests", ps[0], w.profileRequests("carol"))
	}
}
