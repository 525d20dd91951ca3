package jetstream

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestClientDeliversEventsInOrder(t *testing.T) {
	frames := []string{followFrame, postFrame, identityFrame, accountFrame, deleteFrame}
	srv := newFakeServer(t, func(n int, conn *websocket.Conn) {
		if send(conn, frames...) {
			holdOpen(conn)
		}
	})
	wanted := []string{"app.bsky.feed.post", "app.bsky.graph.*"}
	h := startClient(t, Config{URLs: []string{srv.url}, WantedCollections: wanted}, fixed(Position{}), 10)

	wantKinds := []Kind{KindCommit, KindCommit, KindIdentity, KindAccount, KindCommit}
	wantTimes := []int64{1795975616983633, 1795975616991124, 1795975629467810, 1725516665333808, 1795975958545820}
	for i := range frames {
		ev := h.next(t)
		if ev.Kind != wantKinds[i] || ev.TimeUS != wantTimes[i] || ev.Host != srv.url {
			t.Fatalf("event %d = %+v", i, ev)
		}
	}

	q := srv.dials()[0]
	if got := q["wantedCollections"]; !slices.Equal(got, wanted) {
		t.Errorf("wantedCollections = %q, want %q", got, wanted)
	}
	if q.Has("cursor") || q.Has("compress") || q.Has("maxMessageSizeBytes") {
		t.Errorf("unexpected params in %v", q)
	}

	m := h.metrics
	for _, c := range []struct {
		kind, collection, op string
		want                 float64
	}{
		{"commit", "app.bsky.graph.*", "create", 1},
		{"commit", "app.bsky.graph.*", "delete", 1},
		{"commit", "app.bsky.feed.post", "update", 1},
		{"identity", "none", "none", 1},
		{"account", "none", "none", 1},
		{"commit", "other", "create", 0},
	} {
		if got := testutil.ToFloat64(m.received.WithLabelValues(c.kind, c.collection, c.op)); got != c.want {
			t.Errorf("received{%s,%s,%s} = %v, want %v", c.kind, c.collection, c.op, got, c.want)
		}
	}
	var size int
	for _, f := range frames {
		size += len(f)
	}
	if got := testutil.ToFloat64(m.bytes); got != float64(size) {
		t.Errorf("bytes_received = %v, want %d", got, size)
	}
	if got := testutil.ToFloat64(m.connected); got != 1 {
		t.Errorf("connected = %v while connected", got)
	}
	h.stop(t, 2*time.Second)
	if got := testutil.ToFloat64(m.connected); got != 0 {
		t.Errorf("connected = %v after stop", got)
	}
}

// Until this process has handed an event over, every dial asks resume for
// the committed position and turns it into the right cursor for the host
// being dialed.
func TestClientCursorOnReconnect(t *testing.T) {
	srv := newFakeServer(t, func(n int, conn *websocket.Conn) {
		if n < 3 {
			return // drop the connection before any event
		}
		send(conn, postFrame)
		holdOpen(conn)
	})
	const timeUS = 1795975616991124
	positions := []Position{
		// Fresh start: no cursor.
		{},
		// Same host: its sequence number.
		{TimeUS: timeUS, Seq: 42, Host: srv.url},
		// Another host's sequence number is meaningless here: time,
		// rewound by the clock skew allowance (another host's clock).
		{TimeUS: timeUS, Seq: 42, Host: "ws://x/y"},
		// Time only.
		{TimeUS: timeUS},
	}
	var calls int
	resume := func() Position { // called on Run's goroutine only
		p := positions[min(calls, len(positions)-1)]
		calls++
		return p
	}
	h := startClient(t, Config{URLs: []string{srv.url}, Rewind: 2 * time.Second}, resume, 10)
	h.next(t)
	waitFor(t, "four dials", func() bool { return len(srv.dials()) == 4 })

	rewound := strconv.FormatInt(timeUS-2_000_000, 10)
	skewed := strconv.FormatInt(timeUS-(5*time.Minute).Microseconds(), 10)
	want := []string{"", "42", skewed, rewound}
	for i, q := range srv.dials() {
		if got := q.Get("cursor"); got != want[i] || (want[i] == "" && q.Has("cursor")) {
			t.Errorf("dial %d: cursor = %q, want %q", i, got, want[i])
		}
	}
	if got := testutil.ToFloat64(h.metrics.reconnects); got != 3 {
		t.Errorf("reconnects = %v, want 3", got)
	}
}

// Once events were handed over, a reconnect to the same host continues
// from the newest one, even if the committed position is behind it, and
// rewinds no more than half of what the last session carried: a
// connection that drops more often than the rewind window must still make
// progress through a replay.
func TestClientReconnectContinuesWhereItStopped(t *testing.T) {
	srv := newFakeServer(t, func(n int, conn *websocket.Conn) {
		if n < 2 {
			send(conn, postFrame) // one event, then a drop
			return
		}
		holdOpen(conn)
	})
	const committed = 1795975000000000 // well behind the delivered event
	h := startClient(t, Config{URLs: []string{srv.url}, Rewind: 5 * time.Second},
		func() Position { return Position{TimeUS: committed} }, 10)
	h.next(t)
	h.next(t)
	waitFor(t, "three dials", func() bool { return len(srv.dials()) == 3 })
	dials := srv.dials()
	if got, want := dials[0].Get("cursor"), strconv.FormatInt(committed-5_000_000, 10); got != want {
		t.Errorf("first dial cursor = %s, want the committed position rewound %s", got, want)
	}
	for i, q := range dials[1:] {
		// The last session carried one event, no stream time: 1 ms back.
		if got := q.Get("cursor"); got != "1795975616990124" {
			t.Errorf("reconnect %d cursor = %s, want the delivered event's time_us less 1 ms", i+1, got)
		}
	}
	// Restart (after an operator's reset) forgets what was handed over.
	h.client.Restart()
	waitFor(t, "a fourth dial", func() bool { return len(srv.dials()) == 4 })
	if got, want := srv.dials()[3].Get("cursor"), strconv.FormatInt(committed-5_000_000, 10); got != want {
		t.Errorf("dial after Restart cursor = %s, want the committed position rewound %s", got, want)
	}
}

// replayLog is an event log: deletes 1 ms apart from baseUS.
type replayLog struct {
	times  []int64
	frames []string
}

func newReplayLog(baseUS int64, n int) *replayLog {
	l := &replayLog{}
	for i := range n {
		us := baseUS + int64(i)*1000
		l.times = append(l.times, us)
		l.frames = append(l.frames, strings.Replace(deleteFrame, "1795975958545820", strconv.FormatInt(us, 10), 1))
	}
	return l
}

// serve runs a fake Jetstream on l. Connection n sends the events after
// its cursor (all of them without one), skipping those that skip(n, us)
// says are not sent yet, and drops after the frame that last(n, us) picks;
// it holds the connection open once the log is sent.
func (l *replayLog) serve(t *testing.T, skip, last func(n int, us int64) bool) *fakeServer {
	var srv *fakeServer
	srv = newFakeServer(t, func(n int, conn *websocket.Conn) {
		cursor, _ := strconv.ParseInt(srv.dials()[n].Get("cursor"), 10, 64)
		for i, us := range l.times {
			if us <= cursor || skip(n, us) {
				continue
			}
			if !send(conn, l.frames[i]) || last(n, us) {
				return
			}
		}
		holdOpen(conn)
	})
	return srv
}

// Across DIDs, Jetstream need not send events in time_us order: an event
// stamped before the last one delivered can still be on its way when the
// connection drops. After a session that ran a while, the same-host
// reconnect rewinds the full Rewind to get it.
func TestClientReconnectReplaysEventsSentOutOfOrder(t *testing.T) {
	const base int64 = 1795975610000000
	l := newReplayLog(base, 6001) // 6 s of stream
	lastUS := l.times[len(l.times)-1]
	late := base + 5_000_000 // sent ahead of an event stamped 2 s earlier
	early := base + 3_000_000
	srv := l.serve(t,
		func(n int, us int64) bool { return n == 0 && us == early },
		func(n int, us int64) bool { return n == 0 && us == late })
	h := startClient(t, Config{URLs: []string{srv.url}, Rewind: 5 * time.Second}, fixed(Position{}), 100)
	seen := false
	for ev := h.next(t); ev.TimeUS != lastUS; ev = h.next(t) {
		if ev.TimeUS == early {
			seen = true
		}
	}
	if !seen {
		t.Fatalf("reconnect cursor %s: the event stamped before the drop but sent after it was skipped",
			srv.dials()[1].Get("cursor"))
	}
}

// A connection that drops more often than the rewind window fills must
// still get through: the same-host rewind is at most half the stream the
// last session carried, so every session gets past its replay.
func TestClientReconnectGetsPastItsReplay(t *testing.T) {
	l := newReplayLog(1795975610000000, 2000)
	lastUS := l.times[len(l.times)-1]
	var mu sync.Mutex
	sent := map[int]int{}
	srv := l.serve(t, func(int, int64) bool { return false }, func(n int, _ int64) bool {
		mu.Lock()
		defer mu.Unlock()
		sent[n]++
		return sent[n] == 50
	})
	h := startClient(t, Config{URLs: []string{srv.url}, Rewind: 5 * time.Second}, fixed(Position{}), 100)
	for ev := h.next(t); ev.TimeUS != lastUS; ev = h.next(t) {
		if n := len(srv.dials()); n > 200 {
			t.Fatalf("%d dials and the newest event delivered is %d ms into the log of 2000: replay livelock",
				n, (ev.TimeUS-l.times[0])/1000)
		}
	}
}

// An event the running session hands over after Restart (it was already
// on its way) must not write the old position back: the next connect to
// the same host would resume there and undo the operator's reset.
func TestClientRestartIgnoresTheOldSession(t *testing.T) {
	c := NewClient(Config{URLs: []string{"ws://h/subscribe"}}, testDecoder(), nil, nil)
	gen := c.generation()
	c.handedOver(&Event{TimeUS: 1795975616991124, Host: "ws://h/subscribe"}, gen)
	c.Restart()
	c.handedOver(&Event{TimeUS: 1795975616991125, Host: "ws://h/subscribe"}, gen)
	committed := Position{TimeUS: 1795975000000000}
	if pos, rewind := c.resumeFrom("ws://h/subscribe", committed); pos != committed || rewind != c.cfg.Rewind {
		t.Fatalf("after Restart, resume from %+v less %v; want the committed %+v less the full rewind", pos, rewind, committed)
	}
	c.handedOver(&Event{TimeUS: 1795975000000001, Host: "ws://h/subscribe"}, c.generation())
	if pos, _ := c.resumeFrom("ws://h/subscribe", committed); pos.TimeUS != 1795975000000001 {
		t.Fatalf("the new session's event was not recorded: %+v", pos)
	}
}

func TestCursorFor(t *testing.T) {
	const host, other = "wss://a/subscribe", "wss://b/subscribe"
	tests := []struct {
		name string
		pos  Position
		want int64
	}{
		{"zero", Position{}, 0},
		{"seq on same host", Position{TimeUS: 2_000_000_000, Seq: 7, Host: host}, 7},
		{"seq on another host", Position{TimeUS: 2_000_000_000, Seq: 7, Host: other}, 1_995_000_000},
		{"seq without host", Position{TimeUS: 2_000_000_000, Seq: 7}, 1_995_000_000},
		{"time only", Position{TimeUS: 2_000_000_000}, 1_995_000_000},
		{"rewind past zero", Position{TimeUS: 10}, 0},
		{"seq without time elsewhere", Position{Seq: 7, Host: other}, 0},
	}
	for _, tt := range tests {
		if got := cursorFor(host, tt.pos, 5*time.Second); got != tt.want {
			t.Errorf("%s: cursor = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestSubscribeURL(t *testing.T) {
	got, err := subscribeURL("wss://h.example/subscribe?cursor=9&wantedDids=did:plc:a", []string{"a.b.c", "d.e.*"}, 123)
	if err != nil {
		t.Fatal(err)
	}
	want := "wss://h.example/subscribe?cursor=123&wantedCollections=a.b.c&wantedCollections=d.e.%2A&wantedDids=did%3Aplc%3Aa"
	if got != want {
		t.Errorf("url = %s\nwant  %s", got, want)
	}
	got, err = subscribeURL("ws://h/subscribe?cursor=9", nil, 0)
	if err != nil || got != "ws://h/subscribe" {
		t.Errorf("url = %s, %v; a stale cursor param must go", got, err)
	}
	for _, bad := range []string{"https://h/subscribe", "h/subscribe", "ws:///subscribe", "ws://h/%zz"} {
		if _, err := subscribeURL(bad, nil, 0); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestClientFailoverOnRefusal(t *testing.T) {
	first := newFakeServer(t, func(int, *websocket.Conn) {})
	first.refuseWith(http.StatusServiceUnavailable, "jetstream is still starting")
	second := newFakeServer(t, func(n int, conn *websocket.Conn) {
		if n == 0 {
			send(conn, postFrame) // then drop: progress was made, so redial here
			return
		}
		if send(conn, followFrame) {
			holdOpen(conn)
		}
	})
	h := startClient(t, Config{URLs: []string{first.url, second.url}}, fixed(Position{}), 10)

	if ev := h.next(t); ev.Host != second.url || ev.TimeUS != 1795975616991124 {
		t.Fatalf("first event %+v", ev)
	}
	if ev := h.next(t); ev.Host != second.url || ev.TimeUS != 1795975616983633 {
		t.Fatalf("second event %+v", ev)
	}
	if n := len(first.dials()); n != 1 {
		t.Errorf("preferred host dialed %d times; after progress the client should stay on the working host", n)
	}
	if got := testutil.ToFloat64(h.metrics.dialErrors); got != 1 {
		t.Errorf("dial errors = %v, want 1", got)
	}
	logs := h.logs.String()
	if !strings.Contains(logs, "status=503") || !strings.Contains(logs, "jetstream is still starting") {
		t.Errorf("refusal not logged with status and body:\n%s", logs)
	}
	if !strings.Contains(logs, "component=jetstream") {
		t.Errorf("logs lack the component attribute:\n%s", logs)
	}
}

// A session that delivers nothing counts as a failure of that host.
func TestClientRotatesAfterSessionWithoutProgress(t *testing.T) {
	first := newFakeServer(t, func(int, *websocket.Conn) {}) // accept, then hang up
	second := newFakeServer(t, func(n int, conn *websocket.Conn) {
		if send(conn, postFrame) {
			holdOpen(conn)
		}
	})
	h := startClient(t, Config{URLs: []string{first.url, second.url}}, fixed(Position{}), 10)
	if ev := h.next(t); ev.Host != second.url {
		t.Fatalf("event from %q, want the second host", ev.Host)
	}
	if got := testutil.ToFloat64(h.metrics.dialErrors); got != 0 {
		t.Errorf("dial errors = %v, want 0", got)
	}
}

// The backoff doubles while dials fail and resets after a session that
// delivered an event.
func TestClientBackoffGrowsAndResets(t *testing.T) {
	second := make(chan struct{})
	srv := newFakeServer(t, func(n int, conn *websocket.Conn) {
		if n == 0 {
			send(conn, postFrame) // a new event, then a drop
			return
		}
		if n == 1 {
			close(second)
		}
		holdOpen(conn)
	})
	srv.refuseWith(http.StatusServiceUnavailable, "starting")
	cfg := Config{URLs: []string{srv.url}, MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}
	h := startClient(t, cfg, fixed(Position{}), 10)
	waitFor(t, "six refused dials", func() bool { return len(h.sleepsSoFar()) >= 6 })
	// jitter is fixed at 0.5: 3/4 of 100ms, 200ms, 400ms, 800ms, then the 1s cap.
	want := []time.Duration{75, 150, 300, 600, 750, 750}
	for i, d := range h.sleepsSoFar()[:6] {
		if d != want[i]*time.Millisecond {
			t.Errorf("sleep %d = %v, want %v", i, d, want[i]*time.Millisecond)
		}
	}
	srv.refuseWith(0, "")
	h.next(t)
	// The session delivered a new event: the dial after its drop waits the
	// shortest backoff again.
	select {
	case <-second:
	case <-time.After(5 * time.Second):
		t.Fatal("no dial after the dropped session")
	}
	sleeps := h.sleepsSoFar()
	if d := sleeps[len(sleeps)-1]; d != 75*time.Millisecond {
		t.Errorf("sleep after a session with a new event = %v, want 75ms", d)
	}
	h.stop(t, 2*time.Second)
}

// A session that only replays what was already delivered is no progress,
// however many events it carries: a reconnect always replays a little, so
// counting those would redial a host that keeps failing mid-stream at the
// shortest backoff forever. The backoff grows instead, and after a few such
// sessions the client fails over; a session with a new event resets it.
func TestClientFailsOverWhenSessionsOnlyReplay(t *testing.T) {
	const postUS = 1795975616991124
	first := newFakeServer(t, func(n int, conn *websocket.Conn) {
		send(conn, postFrame) // the committed event again, then a drop
	})
	second := newFakeServer(t, func(n int, conn *websocket.Conn) {
		if n == 0 {
			send(conn, deleteFrame) // a new event, then a drop
			return
		}
		holdOpen(conn)
	})
	cfg := Config{URLs: []string{first.url, second.url}, MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}
	h := startClient(t, cfg, fixed(Position{TimeUS: postUS}), 10)
	for i := 0; ; i++ {
		ev := h.next(t)
		if ev.Host == second.url {
			break
		}
		if ev.TimeUS != postUS || i >= 10 {
			t.Fatalf("event %d: %+v; the client never left the host that only replays", i, ev)
		}
	}
	waitFor(t, "the sleep after the new event", func() bool { return len(h.sleepsSoFar()) >= 4 })
	if n := len(first.dials()); n != maxStalledSessions {
		t.Errorf("host that only replays dialed %d times, want %d", n, maxStalledSessions)
	}
	// jitter is fixed at 0.5: 3/4 of 100ms, 200ms, 400ms; then 100ms again
	// after the second host's new event.
	want := []time.Duration{75, 150, 300, 75}
	for i, d := range h.sleepsSoFar()[:4] {
		if d != want[i]*time.Millisecond {
			t.Errorf("sleep %d = %v, want %v", i, d, want[i]*time.Millisecond)
		}
	}
	h.stop(t, 2*time.Second)
}

func TestClientReconnectsAfterDrop(t *testing.T) {
	srv := newFakeServer(t, func(n int, conn *websocket.Conn) {
		if n == 0 {
			send(conn, followFrame, postFrame)
			return
		}
		if send(conn, deleteFrame) {
			holdOpen(conn)
		}
	})
	h := startClient(t, Config{URLs: []string{srv.url}}, fixed(Position{}), 10)
	for i, want := range []int64{1795975616983633, 1795975616991124, 1795975958545820} {
		if ev := h.next(t); ev.TimeUS != want {
			t.Fatalf("event %d: time_us %d, want %d", i, ev.TimeUS, want)
		}
	}
	if got := testutil.ToFloat64(h.metrics.reconnects); got != 1 {
		t.Errorf("reconnects = %v, want 1", got)
	}
}

func TestClientDropsMalformedFramesAndGoesOn(t *testing.T) {
	badDID := `{"did":"nope","time_us":1795975616980000,"kind":"account","account":{"active":true}}`
	srv := newFakeServer(t, func(n int, conn *websocket.Conn) {
		ok := send(conn, "not json", "not json either", badDID) &&
			conn.WriteMessage(websocket.BinaryMessage, []byte{0x28, 0xb5, 0x2f, 0xfd}) == nil &&
			send(conn, postFrame)
		if ok {
			holdOpen(conn)
		}
	})
	h := startClient(t, Config{URLs: []string{srv.url}}, fixed(Position{}), 10)

	// No junk frame is handed over, the bad-DID one with a readable
	// time_us included: a frame judged bad does not move the cursor.
	if ev := h.next(t); ev.Kind != KindCommit || ev.TimeUS != 1795975616991124 || ev.Host != srv.url {
		t.Fatalf("first event %+v, want the post", ev)
	}
	for reason, want := range map[string]float64{ReasonBadJSON: 2, ReasonBadDID: 1, ReasonBinaryFrame: 1, ReasonBadKind: 0} {
		if got := testutil.ToFloat64(h.metrics.dropped.WithLabelValues(reason)); got != want {
			t.Errorf("dropped{%s} = %v, want %v", reason, got, want)
		}
	}
	logs := h.logs.String()
	if n := strings.Count(logs, "reason=bad_json"); n != 1 {
		t.Errorf("bad_json logged %d times, want once (rate limited):\n%s", n, logs)
	}
	if got := testutil.ToFloat64(h.metrics.reconnects); got != 0 {
		t.Errorf("reconnects = %v: junk frames must not cost the connection", got)
	}
}

// A frame stamped in the future never reaches the caller, even as a
// skipped event: its position would become the cursor. That holds on the
// salvage path of an oversized frame too.
func TestClientFutureFrameCarriesNoPosition(t *testing.T) {
	hostile := `{"did":"did:plc:a","time_us":9000000000000000000,"kind":5}`
	future := testNow.Add(time.Hour).UnixMicro()
	big := strings.Replace(postFrame, "1795975616991124", strconv.FormatInt(future, 10), 1)
	big = strings.Replace(big, `"hello"`, `"`+strings.Repeat("a", 8<<10)+`"`, 1)
	srv := newFakeServer(t, func(n int, conn *websocket.Conn) {
		if send(conn, hostile, big, followFrame) {
			holdOpen(conn)
		}
	})
	h := startClient(t, Config{URLs: []string{srv.url}, MaxFrameBytes: 1024}, fixed(Position{}), 10)
	if ev := h.next(t); ev.Kind != KindCommit || ev.TimeUS != 1795975616983633 {
		t.Fatalf("first event %+v, want the follow: the future frames carry no position", ev)
	}
	if got := testutil.ToFloat64(h.metrics.dropped.WithLabelValues(ReasonTimeInFuture)); got != 2 {
		t.Errorf("dropped{%s} = %v, want 2", ReasonTimeInFuture, got)
	}
}

// An oversized frame is discarded without dropping the connection (a
// reconnect would replay it forever), and not handed over.
func TestClientFrameTooLarge(t *testing.T) {
	for _, compress := range []bool{false, true} {
		t.Run(fmt.Sprintf("compression=%v", compress), func(t *testing.T) {
			big := strings.Replace(postFrame, `"hello"`, `"`+strings.Repeat("a", 8<<10)+`"`, 1)
			srv := newFakeServer(t, func(n int, conn *websocket.Conn) {
				if send(conn, big, followFrame) {
					holdOpen(conn)
				}
			})
			cfg := Config{URLs: []string{srv.url}, MaxFrameBytes: 1024, Compression: compress}
			h := startClient(t, cfg, fixed(Position{}), 10)
			if ev := h.next(t); ev.Kind != KindCommit || ev.TimeUS != 1795975616983633 {
				t.Fatalf("first event %+v, want the follow after the oversized frame", ev)
			}
			if got := testutil.ToFloat64(h.metrics.dropped.WithLabelValues(ReasonFrameTooLarge)); got != 1 {
				t.Errorf("dropped{frame_too_large} = %v, want 1", got)
			}
			if n := len(srv.dials()); n != 1 {
				t.Errorf("%d dials, want 1", n)
			}
			if got, want := testutil.ToFloat64(h.metrics.bytes), float64(len(big)+len(followFrame)); got != want {
				t.Errorf("bytes_received = %v, want %v", got, want)
			}
			if q := srv.dials()[0]; q.Has("compress") {
				t.Errorf("compress param sent: %v", q)
			}
			offered := strings.Contains(srv.extensions(), "permessage-deflate")
			if offered != compress {
				t.Errorf("permessage-deflate offered = %v, want %v", offered, compress)
			}
		})
	}
}

func TestClientCancelWhileReadBlocked(t *testing.T) {
	srv := newFakeServer(t, func(n int, conn *websocket.Conn) { holdOpen(conn) })
	h := startClient(t, Config{URLs: []string{srv.url}, ReadTimeout: time.Minute}, fixed(Position{}), 10)
	waitFor(t, "connection", func() bool { return testutil.ToFloat64(h.metrics.connected) == 1 })
	h.stop(t, 2*time.Second)
}

func TestClientCancelWhileOutFull(t *testing.T) {
	sent := make(chan struct{})
	srv := newFakeServer(t, func(n int, conn *websocket.Conn) {
		if send(conn, postFrame, followFrame) {
			close(sent)
			holdOpen(conn)
		}
	})
	h := startClient(t, Config{URLs: []string{srv.url}}, fixed(Position{}), 0) // nobody reads out
	select {
	case <-sent:
	case <-time.After(5 * time.Second):
		t.Fatal("server never sent")
	}
	waitFor(t, "the first frame to be decoded", func() bool {
		return testutil.ToFloat64(h.metrics.received.WithLabelValues("commit", "other", "update")) == 1
	})
	h.stop(t, 2*time.Second)
}

func TestClientAnswersPings(t *testing.T) {
	pong := make(chan string, 1)
	srv := newFakeServer(t, func(n int, conn *websocket.Conn) {
		conn.SetPongHandler(func(data string) error {
			pong <- data
			return nil
		})
		if conn.WriteControl(websocket.PingMessage, []byte("are you there"), time.Now().Add(time.Second)) == nil {
			holdOpen(conn) // reading is what runs the pong handler
		}
	})
	startClient(t, Config{URLs: []string{srv.url}}, fixed(Position{}), 10)
	select {
	case got := <-pong:
		if got != "are you there" {
			t.Errorf("pong %q", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no pong")
	}
}

// A silent connection is given up after ReadTimeout and redialed.
func TestClientReadTimeout(t *testing.T) {
	srv := newFakeServer(t, func(n int, conn *websocket.Conn) { holdOpen(conn) })
	startClient(t, Config{URLs: []string{srv.url}, ReadTimeout: 50 * time.Millisecond}, fixed(Position{}), 10)
	waitFor(t, "a redial after the read timeout", func() bool { return len(srv.dials()) >= 2 })
}

// A server that sends one endless message, pinging between its frames,
// is given up after ReadTimeout: the pings keep a quiet session alive, not
// a message that never ends (found by a review).
func TestClientReadTimeoutHoldsThroughPingsInAMessage(t *testing.T) {
	srv := newFakeServer(t, func(n int, conn *websocket.Conn) {
		if n%2 == 1 {
			holdOpen(conn)
			return
		}
		w, err := conn.NextWriter(websocket.TextMessage)
		if err != nil {
			return
		}
		chunk := bytes.Repeat([]byte(" "), 8<<10) // past the write buffer: a frame each
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			if conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(time.Second)) != nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	for _, maxFrame := range []int64{0, 1024} {
		t.Run(fmt.Sprintf("max_frame_bytes=%d", maxFrame), func(t *testing.T) {
			// With a small cap the message is oversized: its rest is
			// skipped unread, under the same deadline.
			before := len(srv.dials())
			h := startClient(t, Config{URLs: []string{srv.url}, ReadTimeout: 200 * time.Millisecond, MaxFrameBytes: maxFrame}, fixed(Position{}), 10)
			waitFor(t, "a redial after the endless message's read timeout", func() bool { return len(srv.dials()) >= before+2 })
			h.stop(t, 2*time.Second)
		})
	}
}

func TestClientRejectsBadConfig(t *testing.T) {
	for _, urls := range [][]string{nil, {"http://h/subscribe"}} {
		c := NewClient(Config{URLs: urls}, testDecoder(), nil, nil)
		if err := c.Run(context.Background(), fixed(Position{}), make(chan Event)); err == nil {
			t.Errorf("Run with urls %q returned nil", urls)
		}
	}
}

// A nil *Metrics and a nil logger are valid.
func TestClientWithoutMetricsOrLogger(t *testing.T) {
	srv := newFakeServer(t, func(n int, conn *websocket.Conn) {
		if send(conn, "junk", postFrame) {
			holdOpen(conn)
		}
	})
	c := NewClient(Config{URLs: []string{srv.url}}, testDecoder(), nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan Event, 1)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, fixed(Position{}), out) }()
	select {
	case ev := <-out:
		if ev.Kind != KindCommit {
			t.Errorf("event %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// With QueueBytes set, the client hands over no more than that many bytes
// of events the caller has not consumed: a full budget stops delivery
// (and reading) as a full queue does, and each Consumed lets more through.
func TestClientBoundsTheQueuedBytes(t *testing.T) {
	frame := strings.Replace(postFrame, `"hello"`, `"`+strings.Repeat("a", 4<<10)+`"`, 1)
	ev, err := testDecoder().Decode([]byte(frame))
	if err != nil {
		t.Fatal(err)
	}
	size := int64(eventOverhead + len(ev.Commit.Record))
	srv := newFakeServer(t, func(n int, conn *websocket.Conn) {
		for range 10 {
			if !send(conn, frame) {
				return
			}
		}
		holdOpen(conn)
	})
	h := startClient(t, Config{URLs: []string{srv.url}, QueueBytes: 3 * size}, fixed(Position{}), 100)
	var got []Event
	for range 3 {
		got = append(got, h.next(t))
	}
	if h.client.queued.TryAcquire(1) {
		t.Fatal("three events handed over and not consumed, and the byte budget is not spent")
	}
	for i := range got {
		h.client.Consumed(&got[i])
	}
	for range 7 {
		ev := h.next(t)
		h.client.Consumed(&ev)
	}
	if !h.client.queued.TryAcquire(3 * size) {
		t.Error("every event consumed, and the budget did not come back whole")
	}
}

// A session that delivered nothing (a dial the host refused or dropped at
// once, as a restarting host does) says nothing about how much the
// connection carries: the next reconnect still rewinds by what the last
// session that delivered carried, and gets the event sent out of order.
func TestClientRewindOutlivesASessionThatDeliveredNothing(t *testing.T) {
	const base int64 = 1795975610000000
	l := newReplayLog(base, 6001) // 6 s of stream
	lastUS := l.times[len(l.times)-1]
	late, early := base+5_000_000, base+3_000_000
	var srv *fakeServer
	srv = newFakeServer(t, func(n int, conn *websocket.Conn) {
		if n == 1 {
			return // dropped before sending anything
		}
		cursor, _ := strconv.ParseInt(srv.dials()[n].Get("cursor"), 10, 64)
		for i, us := range l.times {
			if us <= cursor || (n == 0 && us == early) {
				continue
			}
			if !send(conn, l.frames[i]) || (n == 0 && us == late) {
				return
			}
		}
		holdOpen(conn)
	})
	h := startClient(t, Config{URLs: []string{srv.url}, Rewind: 5 * time.Second}, fixed(Position{}), 100)
	seen := false
	for ev := h.next(t); ev.TimeUS != lastUS; ev = h.next(t) {
		if ev.TimeUS == early {
			seen = true
		}
	}
	if !seen {
		t.Fatalf("dial cursors %s, %s: after a session that delivered nothing, the event sent out of order was skipped",
			srv.dials()[1].Get("cursor"), srv.dials()[2].Get("cursor"))
	}
}

// A Restart while the client is dialing, after it read the old resume
// position: the id Restart returns is above the dialing session's, or that
// session ends before it reads, so the caller keeps no event read from the
// old position. (Before, Restart returned the dialing session's own id,
// and the events it read before the restart closed it were kept: found by
// a review.)
func TestRestartDuringDialKeepsNoOldEvent(t *testing.T) {
	const oldUS, newUS int64 = 1795975616000000, 1795975000000000
	l := newReplayLog(oldUS, 50)
	srv := newFakeServerQ(t, func(_ int, q url.Values, conn *websocket.Conn) {
		cursor, _ := strconv.ParseInt(q.Get("cursor"), 10, 64)
		if cursor >= oldUS-10_000_000 { // a session from the old position
			send(conn, l.frames...)
		}
		holdOpen(conn)
	})
	dialing, release := make(chan struct{}), make(chan struct{})
	var dials atomic.Int32
	d := &websocket.Dialer{
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if dials.Add(1) == 1 {
				close(dialing)
				<-release
			}
			var nd net.Dialer
			return nd.DialContext(ctx, network, addr)
		},
	}
	var pos atomic.Int64
	pos.Store(oldUS)
	h := startClient(t, Config{URLs: []string{srv.url}, Dialer: d, Rewind: time.Second},
		func() Position { return Position{TimeUS: pos.Load()} }, 1000)
	<-dialing
	pos.Store(newUS) // the caller adopts an operator's reset meanwhile
	minSession := h.client.Restart()
	close(release)

	// The first session has returned once the second dial arrives, and
	// everything it handed over is in out by then.
	deadline := time.Now().Add(10 * time.Second)
	for len(srv.dials()) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no second dial: %v", srv.dials())
		}
		time.Sleep(time.Millisecond)
	}
	if got := srv.dials()[1].Get("cursor"); got != strconv.FormatInt(newUS-time.Second.Microseconds(), 10) {
		t.Errorf("second dial at cursor %s, want the reset position less the rewind", got)
	}
	for {
		select {
		case ev := <-h.out:
			if ev.Session >= minSession {
				t.Fatalf("event at %d from the old position carries session %d, not below Restart's %d", ev.TimeUS, ev.Session, minSession)
			}
			continue
		default:
		}
		break
	}
}

// A session's report counts a dropped frame as dropped, not as delivered
// (the daemon stores the report as a sync run's written and skipped
// counts), and hands only the good frame over.
func TestSessionReportCountsADroppedFrameOnce(t *testing.T) {
	bad := strings.Replace(postFrame, `"operation":"update"`, `"operation":"bogus"`, 1)
	srv := newFakeServer(t, func(n int, conn *websocket.Conn) {
		if n == 0 {
			send(conn, postFrame, bad, bad, followFrame)
		}
		holdOpen(conn)
	})
	reports := make(chan SessionReport, 10)
	h := startClient(t, Config{URLs: []string{srv.url}, OnSessionEnd: func(r SessionReport) { reports <- r }}, fixed(Position{}), 10)
	for i, want := range []int64{1795975616991124, 1795975616983633} { // the post, then the follow
		if ev := h.next(t); ev.Kind != KindCommit || ev.TimeUS != want {
			t.Fatalf("event %d handed over %+v, want the commit at %d: nothing between", i, ev, want)
		}
	}
	h.cancel()
	r := <-reports
	if r.Delivered != 2 || r.Dropped != 2 {
		t.Fatalf("report: delivered %d, dropped %d; want 2 and 2", r.Delivered, r.Dropped)
	}
}

// A frame the decoder drops as malformed (here: an unknown kind) handed
// its "cursor" over as the resume sequence when it had the newest
// time_us: a same-host reconnect then asked the server for that sequence,
// far behind everything already delivered (a v2 server replays its whole
// window from it; found by a review). A dropped frame does not move the
// position at all now (TestAMalformedFrameStampedAheadIsNotThePosition).
func TestAMalformedFrameDoesNotSetTheResumeSequence(t *testing.T) {
	good := `{"did":"did:plc:kdmhsqjgb4mmrul5nxbat2xs","time_us":1795975616991124,"cursor":900000,"kind":"commit","commit":{"rev":"3ke6kg3wlch22","operation":"delete","collection":"app.bsky.feed.post","rkey":"3kbbpidw2r7zx"}}`
	junk := `{"did":"did:plc:kdmhsqjgb4mmrul5nxbat2xs","time_us":1795975616991200,"cursor":3,"kind":"bogus"}`
	srv := newFakeServer(t, func(n int, conn *websocket.Conn) {
		if n == 0 {
			send(conn, good, junk) // then an abrupt drop
			return
		}
		holdOpen(conn)
	})
	h := startClient(t, Config{URLs: []string{srv.url}}, fixed(Position{}), 10)
	h.next(t)
	waitFor(t, "a reconnect", func() bool { return len(srv.dials()) == 2 })
	select {
	case ev := <-h.out:
		t.Fatalf("the junk frame was handed over: %+v", ev)
	default:
	}
	if got := srv.dials()[1].Get("cursor"); got == "3" {
		t.Errorf("reconnect cursor = %s: the sequence of a frame dropped as malformed, behind the delivered sequence 900000", got)
	}
}

// A Restart while the client sleeps out a reconnect's backoff dials the
// reset position at once, and the session it dials is not then closed by
// the spent restart signal. (Before, the Restart waited for the sleep, up
// to max_backoff, and then cost the next session: raised by the fifteenth
// session's review.)
func TestARestartCutsTheBackoffShort(t *testing.T) {
	closed := make(chan struct{})
	srv := newFakeServer(t, func(n int, conn *websocket.Conn) {
		holdOpen(conn)
		if n == 0 {
			close(closed)
		}
	})
	srv.refuseWith(http.StatusServiceUnavailable, "starting")
	const resetUS int64 = 1795975000000000
	h := startClientSleeping(t, Config{URLs: []string{srv.url}, Rewind: time.Second, MinBackoff: time.Hour, MaxBackoff: time.Hour},
		fixed(Position{TimeUS: resetUS}), 10, sleepCtx)
	waitFor(t, "the client sleeping after a refused dial", func() bool { return len(h.sleepsSoFar()) == 1 })
	srv.refuseWith(0, "")
	h.client.Restart()
	waitFor(t, "a dial after the Restart", func() bool { return len(srv.dials()) == 2 })
	if got, want := srv.dials()[1].Get("cursor"), strconv.FormatInt(resetUS-time.Second.Microseconds(), 10); got != want {
		t.Errorf("dial after Restart at cursor %s, want the reset position rewound %s", got, want)
	}
	// The session stays up: no restart signal was left over to close it.
	select {
	case <-closed:
		t.Fatalf("the session dialed after the Restart was closed; dials %v, logs:\n%s", srv.dials(), h.logs.String())
	case <-time.After(300 * time.Millisecond):
	}
	if n := len(h.sleepsSoFar()); n != 1 {
		t.Errorf("%d backoff sleeps, want the one the Restart cut short", n)
	}
}

// A MaxFrameBytes past MaxMaxFrameBytes is held to it: at math.MaxInt64
// the read's limit (MaxFrameBytes+1) overflowed to a negative one, every
// frame read as empty and was dropped as bad JSON, and the client cycled
// through its hosts delivering nothing (a review).
func TestAHugeMaxFrameBytesStillReadsFrames(t *testing.T) {
	srv := newFakeServer(t, func(n int, conn *websocket.Conn) {
		if send(conn, followFrame) {
			holdOpen(conn)
		}
	})
	h := startClient(t, Config{URLs: []string{srv.url}, MaxFrameBytes: math.MaxInt64}, fixed(Position{}), 10)
	if ev := h.next(t); ev.Kind != KindCommit || ev.TimeUS != 1795975616983633 {
		t.Fatalf("event %+v, want the follow", ev)
	}
	if got := testutil.ToFloat64(h.metrics.dropped.WithLabelValues(ReasonBadJSON)); got != 0 {
		t.Errorf("dropped{%s} = %v, want 0", ReasonBadJSON, got)
	}
}

// A session resumed by sequence number whose host numbers its events
// differently now (a replaced instance counting from 0 again) ends before
// it hands anything over, and the client resumes by time from the same
// position, rewound as for a new host: where our number was past the new
// instance's head it started us at its live tip, and the stream since the
// position was skipped for good (a review of the cursor contract).
func TestAHostThatRenumberedItsEventsIsResumedByTime(t *testing.T) {
	const t0 int64 = 1795975616991124
	frame := func(us, seq int64, rkey string) string {
		return fmt.Sprintf(`{"did":"did:plc:kdmhsqjgb4mmrul5nxbat2xs","time_us":%d,"cursor":%d,"kind":"commit","commit":{"rev":"3ke6kg3wlch22","operation":"delete","collection":"app.bsky.feed.post","rkey":%q}}`, us, seq, rkey)
	}
	srv := newFakeServer(t, func(n int, conn *websocket.Conn) {
		switch n {
		case 0:
			send(conn, frame(t0, 900000, "3kbbpidw2r7za")) // then an abrupt drop
		case 1:
			// The new instance, asked for 900000, starts at its tip.
			if send(conn, frame(t0+60_000_000, 12, "3kbbpidw2r7zc")) {
				holdOpen(conn)
			}
		default:
			if send(conn, frame(t0+1_000_000, 7, "3kbbpidw2r7zb"), frame(t0+60_000_000, 12, "3kbbpidw2r7zc")) {
				holdOpen(conn)
			}
		}
	})
	h := startClient(t, Config{URLs: []string{srv.url}, Rewind: time.Second}, fixed(Position{}), 10)
	if ev := h.next(t); ev.Seq != 900000 {
		t.Fatalf("first event %+v", ev)
	}
	if ev := h.next(t); ev.TimeUS != t0+1_000_000 {
		t.Fatalf("after the renumbered host: event at %d (seq %d), want the one a second after the position, resumed by time", ev.TimeUS, ev.Seq)
	}
	dials := srv.dials()
	if len(dials) != 3 || dials[1].Get("cursor") != "900000" {
		t.Fatalf("dials %v, want a resume by sequence, then one by time", dials)
	}
	want := strconv.FormatInt(t0-h.client.hostChangeRewind().Microseconds(), 10)
	if got := dials[2].Get("cursor"); got != want {
		t.Errorf("resumed by time at cursor %s, want the position rewound as for a new host %s", got, want)
	}
	if got := testutil.ToFloat64(h.metrics.numbering); got != 1 {
		t.Errorf("sequence_resumes_refused_total = %v, want 1", got)
	}
}
