package jetstream

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// serveLog runs a fake Jetstream on l that sends every event after the
// dial's cursor, then reads until the client goes; the close frames the
// client sends arrive on closes.
func serveLog(t *testing.T, l *replayLog) (*fakeServer, <-chan *websocket.CloseError) {
	closes := make(chan *websocket.CloseError, 16)
	var srv *fakeServer
	srv = newFakeServer(t, func(n int, conn *websocket.Conn) {
		cursor, _ := strconv.ParseInt(srv.dials()[n].Get("cursor"), 10, 64)
		for i, us := range l.times {
			if us > cursor && !send(conn, l.frames[i]) {
				return
			}
		}
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				var ce *websocket.CloseError
				if errors.As(err, &ce) {
					closes <- ce
				}
				return
			}
		}
	})
	return srv, closes
}

// queueKinds are the two ways the caller's queue fills: by count (out)
// and by bytes (QueueBytes), at five events either way.
var queueKinds = []struct {
	name   string
	outCap int
	bytes  bool
}{{"count", 5, false}, {"bytes", 100, true}}

// steppedAway starts a client on a log of 50 events, with nobody taking
// from its queue, and waits until its session has stepped away.
func steppedAway(t *testing.T, outCap int, bytes bool, stall time.Duration) (*harness, *fakeServer, *replayLog, <-chan *websocket.CloseError) {
	t.Helper()
	l := newReplayLog(1795975610000000, 50)
	srv, closes := serveLog(t, l)
	cfg := Config{URLs: []string{srv.url}, Rewind: 5 * time.Second, StallTimeout: stall}
	if bytes {
		cfg.QueueBytes = 5 * eventOverhead // deletes carry no record
	}
	h := startClient(t, cfg, fixed(Position{}), outCap)
	waitFor(t, "the session to step away", func() bool { return testutil.ToFloat64(h.metrics.stepAways) == 1 })
	return h, srv, l, closes
}

// A consumer applying a long batch leaves the client's queue full, and a
// session waiting on it reads nothing, so it answers no ping: Jetstream
// would drop it. Once it has made progress, the session closes its
// connection itself (a close frame, not a dead socket), waits for room
// without a connection, and redials at once, from the newest event it
// handed over: nothing is lost and no backoff is taken. The queue is full
// by count (out) or by bytes (QueueBytes).
func TestClientStepsAwayWhileTheQueueIsFull(t *testing.T) {
	for _, tc := range queueKinds {
		t.Run(tc.name, func(t *testing.T) {
			h, srv, l, closes := steppedAway(t, tc.outCap, tc.bytes, 50*time.Millisecond)
			select {
			case ce := <-closes:
				if ce.Code != websocket.CloseNormalClosure || ce.Text != "consumer busy" {
					t.Errorf("close frame %d %q, want %d \"consumer busy\"", ce.Code, ce.Text, websocket.CloseNormalClosure)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the server saw no close frame")
			}
			if n := len(srv.dials()); n != 1 {
				t.Fatalf("%d dials while the queue was still full; the client must wait for room first", n)
			}

			seen := map[int64]bool{}
			last := l.times[len(l.times)-1]
			for ev := h.next(t); ; ev = h.next(t) {
				h.client.Consumed(&ev)
				seen[ev.TimeUS] = true
				if ev.TimeUS == last {
					break
				}
			}
			for i, us := range l.times {
				if !seen[us] {
					t.Errorf("event %d (time_us %d) was never delivered", i, us)
				}
			}
			dials := srv.dials()
			if len(dials) < 2 {
				t.Fatalf("%d dials, want a redial after stepping away", len(dials))
			}
			// Five events handed over, then the sixth once there was room:
			// the redial resumes at the sixth less half the 4 ms the
			// session carried.
			if got, want := dials[1].Get("cursor"), strconv.FormatInt(l.times[5]-2000, 10); got != want {
				t.Errorf("redial cursor %s, want %s", got, want)
			}
			if s := h.sleepsSoFar(); len(s) != 0 {
				t.Errorf("backoff %v after stepping away; it is not a failure", s)
			}
		})
	}
}

// A session still in its replay (nothing newer than the resume position
// handed over yet) does not step away however long the queue stays full:
// its redial would replay the same events, and a consumer whose queue
// holds less than a replay would never get past it.
func TestClientDoesNotStepAwayDuringItsReplay(t *testing.T) {
	l := newReplayLog(1795975610000000, 50)
	srv, _ := serveLog(t, l)
	committed := Position{TimeUS: l.times[30]} // 31 events replayed first
	h := startClient(t, Config{URLs: []string{srv.url}, Rewind: 5 * time.Second, StallTimeout: 10 * time.Millisecond},
		fixed(committed), 5)
	waitFor(t, "a full queue", func() bool { return len(h.out) == cap(h.out) })
	time.Sleep(100 * time.Millisecond) // ten stall timeouts
	if got := testutil.ToFloat64(h.metrics.stepAways); got != 0 {
		t.Fatalf("stepped away %v times during the replay", got)
	}
	for ev := h.next(t); ev.TimeUS != l.times[49]; ev = h.next(t) {
	}
	if n := len(srv.dials()); n != 1 {
		t.Errorf("%d dials, want the one session through its replay", n)
	}
}

// A Restart (an operator's cursor reset) while the client waits for room
// after stepping away drops the event it held, which is from before the
// reset, and redials from the committed position at once, whether the
// queue is full by count (out) or by bytes (QueueBytes).
func TestClientRestartWhileSteppedAway(t *testing.T) {
	for _, tc := range queueKinds {
		t.Run(tc.name, func(t *testing.T) {
			h, srv, l, _ := steppedAway(t, tc.outCap, tc.bytes, 20*time.Millisecond)
			h.client.Restart()
			waitFor(t, "a redial", func() bool { return len(srv.dials()) == 2 })
			if got := srv.dials()[1].Get("cursor"); got != "" {
				t.Errorf("redial after Restart asked for cursor %s, want the committed position (none)", got)
			}
			for range 5 {
				ev := h.next(t)
				h.client.Consumed(&ev)
				if ev.Session != 1 {
					t.Fatalf("queued event of session %d, want the first session's five", ev.Session)
				}
			}
			if ev := h.next(t); ev.TimeUS != l.times[0] || ev.Session == 1 {
				t.Errorf("after the queued five, event %d of session %d; want the log's first from the new session (the held event dropped)",
					ev.TimeUS, ev.Session)
			}
		})
	}
}

// A Restart ends a session waiting for room in the queue's bytes
// (QueueBytes) as it ends one waiting on out: the client redials from the
// committed position at once, not once the caller has made room.
func TestClientRestartWhileWaitingForQueueBytes(t *testing.T) {
	l := newReplayLog(1795975610000000, 50)
	srv, _ := serveLog(t, l)
	h := startClient(t, Config{URLs: []string{srv.url}, Rewind: 5 * time.Second, StallTimeout: -1, QueueBytes: 5 * eventOverhead},
		fixed(Position{}), 100)
	waitFor(t, "a full queue", func() bool { return len(h.out) == 5 })
	h.client.Restart()
	waitFor(t, "a redial", func() bool { return len(srv.dials()) == 2 })
	if got := testutil.ToFloat64(h.metrics.stepAways); got != 0 {
		t.Errorf("stepped away %v times; StallTimeout is negative", got)
	}
}
