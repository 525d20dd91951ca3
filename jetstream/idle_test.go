package jetstream

import (
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// pingUntilGone pings every interval until the client goes away, reading
// meanwhile (reading is what answers the client's own control frames).
func pingUntilGone(conn *websocket.Conn, interval time.Duration) {
	gone := make(chan struct{})
	go func() { holdOpen(conn); close(gone) }()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-gone:
			return
		case <-t.C:
			if conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(time.Second)) != nil {
				return
			}
		}
	}
}

// A host that stops sending events but keeps pinging (its own upstream
// stalled) held the client for good: the pings renewed the read deadline.
// After IdleTimeout with no event the session ends and the next host is
// tried.
func TestClientFailsOverFromAHostThatOnlyPings(t *testing.T) {
	stalled := newFakeServer(t, func(n int, conn *websocket.Conn) {
		if n == 0 && !send(conn, postFrame) {
			return
		}
		pingUntilGone(conn, 20*time.Millisecond)
	})
	next := newFakeServer(t, func(n int, conn *websocket.Conn) {
		if send(conn, followFrame) {
			holdOpen(conn)
		}
	})
	h := startClient(t, Config{
		URLs:        []string{stalled.url, next.url},
		ReadTimeout: time.Second, IdleTimeout: 200 * time.Millisecond,
	}, fixed(Position{}), 10)
	if ev := h.next(t); ev.Host != stalled.url {
		t.Fatalf("first event from %s", ev.Host)
	}
	if ev := h.next(t); ev.Host != next.url || ev.TimeUS != 1795975616983633 {
		t.Fatalf("after the stalled host went quiet, event %+v; want the next host's", ev)
	}
	if got := testutil.ToFloat64(h.metrics.idle); got != 1 {
		t.Errorf("idle timeouts = %v, want 1", got)
	}
	if n := len(stalled.dials()); n != 1 {
		t.Errorf("stalled host dialed %d times, want 1 (the client should move on at once)", n)
	}
}

// Events coming more often than IdleTimeout keep the session, and so do
// pings alone without it.
func TestClientKeepsAQuietSessionWithinTheIdleTimeout(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		// every is the pause between events; 0 sends one, then only pings.
		every time.Duration
	}{
		{"events within the idle timeout", Config{ReadTimeout: time.Second, IdleTimeout: 300 * time.Millisecond}, 60 * time.Millisecond},
		{"pings alone with no idle timeout", Config{ReadTimeout: 100 * time.Millisecond}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newReplayLog(1795975610000000, 12)
			srv := newFakeServer(t, func(n int, conn *websocket.Conn) {
				if tc.every == 0 {
					if send(conn, l.frames[0]) {
						pingUntilGone(conn, 20*time.Millisecond)
					}
					return
				}
				for _, f := range l.frames {
					if !send(conn, f) {
						return
					}
					time.Sleep(tc.every)
				}
				holdOpen(conn)
			})
			tc.cfg.URLs = []string{srv.url}
			h := startClient(t, tc.cfg, fixed(Position{}), 100)
			want := len(l.frames)
			if tc.every == 0 {
				want = 1
			}
			for range want {
				h.next(t)
			}
			time.Sleep(200 * time.Millisecond)
			if n := len(srv.dials()); n != 1 {
				t.Errorf("%d dials, want 1: the session ended though it was alive", n)
			}
			if got := testutil.ToFloat64(h.metrics.idle); got != 0 {
				t.Errorf("idle timeouts = %v, want 0", got)
			}
		})
	}
}

// The idle limit bounds the wait for a message, not the reading of one
// that has begun: a frame whose first part came just before the limit
// and its rest just after was cut off, the session ended as idle and the
// event was lost to a failover (found by a review).
func TestAMessageArrivingAtTheIdleLimitIsRead(t *testing.T) {
	frame := strings.Replace(postFrame, `"text":"hello"`, `"text":"`+strings.Repeat("a", 12<<10)+`"`, 1)
	srv := newFakeServer(t, func(n int, conn *websocket.Conn) {
		if n > 0 {
			holdOpen(conn)
			return
		}
		time.Sleep(200 * time.Millisecond)
		w, err := conn.NextWriter(websocket.TextMessage)
		if err != nil {
			return
		}
		// Past the write buffer (4 KiB), the first part goes out as a
		// frame of its own.
		half := len(frame) / 2
		if _, err := w.Write([]byte(frame[:half])); err != nil {
			return
		}
		time.Sleep(250 * time.Millisecond) // past the idle limit
		if _, err := w.Write([]byte(frame[half:])); err != nil || w.Close() != nil {
			return
		}
		holdOpen(conn)
	})
	h := startClient(t, Config{URLs: []string{srv.url}, ReadTimeout: 5 * time.Second, IdleTimeout: 300 * time.Millisecond},
		fixed(Position{}), 10)
	if ev := h.next(t); ev.TimeUS != 1795975616991124 || ev.Session != 1 {
		t.Fatalf("event %+v, want the post from the first session", ev)
	}
	if got := testutil.ToFloat64(h.metrics.idle); got != 0 {
		t.Errorf("idle timeouts = %v before the event was read, want 0", got)
	}
}
