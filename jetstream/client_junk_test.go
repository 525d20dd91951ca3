package jetstream

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A frame the decoder drops as malformed (here a bad DID) used to hand its
// time over as the stream position. One stamped ahead of the frames sent
// after it then became the position: the next same-host reconnect asked
// the server for a cursor past them, and they were never delivered. Ahead
// of the local clock, inside the skew a valid frame is allowed, or ahead
// of a catch-up an hour behind the clock, the same. (Both found by
// reviews.) A frame judged bad now moves no position.
func TestAMalformedFrameStampedAheadIsNotThePosition(t *testing.T) {
	for _, tt := range []struct {
		name         string
		base, junkAt time.Time
	}{
		{"ahead of the clock", testNow.Add(-time.Minute), testNow.Add(4 * time.Minute)},
		{"ahead of a catch-up", testNow.Add(-time.Hour), testNow.Add(-time.Second)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			delAt := func(us int64) string {
				return strings.Replace(deleteFrame, "1795975958545820", strconv.FormatInt(us, 10), 1)
			}
			base, junkUS := tt.base.UnixMicro(), tt.junkAt.UnixMicro()
			junk := fmt.Sprintf(`{"did":"not-a-did","time_us":%d,"kind":"commit"}`, junkUS)
			type entry struct {
				us    int64
				frame string
			}
			// The server's log in the order it sends: a good event, the
			// junk, and a good event stamped a second after the first
			// (after the junk in the stream, before it in time).
			log := []entry{{base, delAt(base)}, {junkUS, junk}, {base + 1_000_000, delAt(base + 1_000_000)}}
			var srv *fakeServer
			srv = newFakeServer(t, func(n int, conn *websocket.Conn) {
				if n == 0 {
					send(conn, log[0].frame, log[1].frame)
					return // the connection drops before the third event is sent
				}
				// Later connections replay from the cursor, as Jetstream does.
				cursor, _ := strconv.ParseInt(srv.dials()[n].Get("cursor"), 10, 64)
				for _, e := range log {
					if e.us >= cursor && !send(conn, e.frame) {
						return
					}
				}
				holdOpen(conn)
			})
			h := startClient(t, Config{URLs: []string{srv.url}, Rewind: 5 * time.Second}, fixed(Position{}), 100)
			deadline := time.After(3 * time.Second)
			for {
				select {
				case ev := <-h.out:
					if ev.Kind == KindSkipped {
						t.Errorf("the junk frame was handed over with position %d", ev.TimeUS)
					}
					if ev.TimeUS == base+1_000_000 {
						return
					}
				case <-deadline:
					d := srv.dials()
					t.Fatalf("the event sent after the dropped frame never arrived: %d dials, reconnect cursor %s (junk at %d, event at %d)",
						len(d), d[len(d)-1].Get("cursor"), junkUS, base+1_000_000)
				}
			}
		})
	}
}

// A host that sends frames, but never a valid one, used to keep the
// session forever: every junk frame renewed the read deadline, the
// position never moved, and the client never tried the next URL. A
// session that reads no valid frame for ReadTimeout now ends, and one that
// delivered nothing fails over (found by a review).
func TestAHostSendingOnlyJunkFailsOver(t *testing.T) {
	junkHost := newFakeServer(t, func(_ int, conn *websocket.Conn) {
		for {
			if !send(conn, `{"did":"not-a-did","time_us":1,"kind":"commit"}`) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	goodHost := newFakeServer(t, func(_ int, conn *websocket.Conn) {
		send(conn, deleteFrame)
		holdOpen(conn)
	})
	h := startClient(t, Config{URLs: []string{junkHost.url, goodHost.url}, ReadTimeout: 300 * time.Millisecond}, fixed(Position{}), 10)
	select {
	case ev := <-h.out:
		if ev.Host != goodHost.url {
			t.Fatalf("event from %s, want the second host", ev.Host)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no event from the second host: %d dials to the junk host, %d to the good one",
			len(junkHost.dials()), len(goodHost.dials()))
	}
	if got := testutil.ToFloat64(h.metrics.dropped.WithLabelValues(ReasonBadDID)); got == 0 {
		t.Errorf("the junk frames were not counted as dropped")
	}
}

// The junk-only check measured from the last valid frame, so a healthy
// session ended on its first malformed frame whenever that frame came more
// than ReadTimeout after the last valid one: after a quiet spell kept by
// pings alone (a narrow wantedCollections filter), or after a long wait
// for room in the caller's queue. With nothing delivered yet, the quiet
// session even failed over. Only a run of junk lasting ReadTimeout ends a
// session.
func TestOneMalformedFrameAfterAQuietSpellKeepsTheSession(t *testing.T) {
	const readTimeout = 300 * time.Millisecond
	junk := `{"did":"not-a-did","time_us":1,"kind":"commit"}`

	t.Run("pings only", func(t *testing.T) {
		srv := newFakeServer(t, func(_ int, conn *websocket.Conn) {
			for end := time.Now().Add(2 * readTimeout); time.Now().Before(end); {
				if conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(time.Second)) != nil {
					return
				}
				time.Sleep(readTimeout / 6)
			}
			send(conn, junk, deleteFrame)
			holdOpen(conn)
		})
		other := newFakeServer(t, func(_ int, conn *websocket.Conn) { holdOpen(conn) })
		h := startClient(t, Config{URLs: []string{srv.url, other.url}, ReadTimeout: readTimeout}, fixed(Position{}), 10)
		ev := h.next(t)
		if ev.Host != srv.url || ev.Session != 1 {
			t.Fatalf("event from %s in session %d; want the first session on %s", ev.Host, ev.Session, srv.url)
		}
		if n := len(other.dials()); n != 0 {
			t.Errorf("failed over to the second host (%d dials)", n)
		}
	})

	t.Run("long wait for room", func(t *testing.T) {
		srv := newFakeServer(t, func(_ int, conn *websocket.Conn) {
			send(conn, postFrame, junk, deleteFrame)
			holdOpen(conn)
		})
		// out holds nothing: the first event waits until it is read.
		h := startClient(t, Config{URLs: []string{srv.url}, ReadTimeout: readTimeout}, fixed(Position{}), 0)
		time.Sleep(2 * readTimeout)
		first, second := h.next(t), h.next(t)
		if first.Session != 1 || second.Session != 1 {
			t.Fatalf("events in sessions %d and %d; want both in the first", first.Session, second.Session)
		}
		if n := len(srv.dials()); n != 1 {
			t.Errorf("%d dials; want 1", n)
		}
	})
}
