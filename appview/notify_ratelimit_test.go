package appview

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/egress"
	"github.com/atfeeds/appview/internal/testclock"
	"github.com/atfeeds/appview/pds"
	"github.com/atfeeds/appview/xrpc"
)

// answerRateLimited answers 429 with header set, as a Bluesky PDS does.
func answerRateLimited(w http.ResponseWriter, header map[string]string) {
	for k, v := range header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusTooManyRequests)
	io.WriteString(w, `{"error":"RateLimitExceeded","message":"Rate Limit Exceeded"}`)
}

// A PDS host that answered a notified record's getRecord with 429 is
// not asked again, by any call, until the time it gave (Retry-After,
// else RateLimit-Reset; capped as the backfill caps it). Meanwhile its
// records fail at once with UpstreamFailure, the message saying how long
// to wait, and records on other hosts are fetched as usual. Before, the
// next call asked the host again at once.
func TestNotifyWaitsOutAHostsRateLimit(t *testing.T) {
	start := time.Now().Truncate(time.Second)
	for _, tc := range []struct {
		name   string
		header map[string]string
		pause  time.Duration
	}{
		{"retry-after", map[string]string{"Retry-After": "30"}, 30 * time.Second},
		{"ratelimit-reset", map[string]string{"RateLimit-Reset": strconv.FormatInt(start.Add(90*time.Second).Unix(), 10)}, 90 * time.Second},
		{"capped", map[string]string{"Retry-After": "999999999"}, 24 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked atomic.Int32
			var limiting atomic.Bool
			limiting.Store(true)
			limited := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				asked.Add(1)
				if limiting.Load() {
					answerRateLimited(w, tc.header)
					return
				}
				answerPost(w, r)
			}))
			t.Cleanup(limited.Close)
			other := httptest.NewServer(http.HandlerFunc(answerPost))
			t.Cleanup(other.Close)

			clock := testclock.New(start)
			n := newTestNotifier(t, other.URL, slog.New(slog.DiscardHandler))
			n.resolver = hostResolver{"did:plc:limited": limited.URL, "did:plc:other": other.URL}
			n.now = clock.Now
			httpc := egress.NewClient(egress.Options{AllowPrivateNetworks: true, Timeout: 5 * time.Second})
			n.pds = pds.NewClient(httpc, pds.Options{Timeout: 5 * time.Second, Now: clock.Now})

			limitedURI := func(i int) string { return fmt.Sprintf("at://did:plc:limited/%s/3kaaaaaaaaa%02d", postNSID, i) }
			otherURI := func(i int) string { return fmt.Sprintf("at://did:plc:other/%s/3kaaaaaaaaa%02d", postNSID, i) }
			call := func(uris ...string) xrpc.NotifyResult {
				t.Helper()
				var us []syntax.ATURI
				for _, u := range uris {
					us = append(us, syntax.ATURI(u))
				}
				res, err := n.NotifyOfUpdate(context.Background(), us)
				if err != nil {
					t.Fatal(err)
				}
				return res
			}

			// The 429 itself.
			res := call(limitedURI(1))
			if got := errorNames(res)[limitedURI(1)]; got != xrpc.NotifyErrUpstreamFailure || asked.Load() != 1 {
				t.Fatalf("the 429: %+v, %d requests", res, asked.Load())
			}

			// At once, and until just before the pause ends: not asked.
			for _, wait := range []time.Duration{0, tc.pause - time.Second} {
				clock.Advance(wait)
				res = call(limitedURI(2), otherURI(1))
				if asked.Load() != 1 {
					t.Fatalf("%v after the 429, the host was asked again (%d requests)", clock.Now().Sub(start), asked.Load())
				}
				if !slices.Equal(res.Indexed, []string{otherURI(1)}) || len(res.Errors) != 1 ||
					res.Errors[0].Error != xrpc.NotifyErrUpstreamFailure || !strings.Contains(res.Errors[0].Message, "rate limit") {
					t.Fatalf("%v after the 429: %+v", clock.Now().Sub(start), res)
				}
				left := tc.pause - clock.Now().Sub(start)
				if want := fmt.Sprintf("retry in %ds", int(left.Seconds())); !strings.Contains(res.Errors[0].Message, want) {
					t.Errorf("message %q lacks %q", res.Errors[0].Message, want)
				}
			}

			// Once the pause is over, the host is asked again.
			limiting.Store(false)
			clock.Advance(time.Second)
			res = call(limitedURI(3))
			if !slices.Equal(res.Indexed, []string{limitedURI(3)}) || asked.Load() != 2 {
				t.Fatalf("after the pause: %+v, %d requests", res, asked.Load())
			}
		})
	}
}

// Records queued for a host's request slots when the host answers 429 are
// not sent: the host is paused before the slot of the request that met
// the limit is given back, and a record checks for a pause again once it
// has its slot (as the backfill's TestNoRequestReachesAPausedHostFromTheSlotQueue).
func TestNotifyNoRequestReachesAPausedHostFromTheSlotQueue(t *testing.T) {
	var asked atomic.Int32
	limited := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		answerRateLimited(w, map[string]string{"Retry-After": "60"})
	}))
	t.Cleanup(limited.Close)
	n := newTestNotifier(t, limited.URL, slog.New(slog.DiscardHandler))
	var uris []syntax.ATURI
	for i := range 3 * notifyPerHost {
		uris = append(uris, syntax.ATURI(fmt.Sprintf("at://did:plc:author%d/%s/3kaaaaaaaaa%02d", i, postNSID, i)))
	}
	res, err := n.NotifyOfUpdate(context.Background(), uris)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Errors) != len(uris) {
		t.Errorf("%d errors, want %d: %+v", len(res.Errors), len(uris), res)
	}
	for _, e := range res.Errors {
		if e.Error != xrpc.NotifyErrUpstreamFailure {
			t.Errorf("%s: %s, want %s", e.URI, e.Error, xrpc.NotifyErrUpstreamFailure)
		}
	}
	if got := asked.Load(); got > notifyPerHost {
		t.Errorf("the host was asked %d times, want at most %d (the requests in flight when it first answered 429)", got, notifyPerHost)
	}
}
