package jetstream

import (
	"testing"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A compressed message whose deflate data is corrupt is that message's
// fault, not the connection's: with no context takeover every message is
// decompressed on its own, and the framing around it is intact. It is
// dropped and counted like an oversized frame and the session reads on;
// ending the session replayed the same message at every reconnect, so the
// events after it never came.
func TestClientDropsACorruptCompressedFrame(t *testing.T) {
	for name, raw := range map[string][]byte{
		// FIN, RSV1 (compressed), text; 4 bytes of payload whose first
		// block has the reserved type 3.
		"one frame": {0xc1, 0x04, 0xff, 0xff, 0xff, 0xff},
		// The same in two fragments: the rest of the message is skipped.
		"fragmented": {0x41, 0x02, 0xff, 0xff, 0x80, 0x02, 0xff, 0xff},
	} {
		t.Run(name, func(t *testing.T) { testCorruptCompressedFrame(t, raw) })
	}
}

func testCorruptCompressedFrame(t *testing.T, raw []byte) {
	srv := newFakeServer(t, func(n int, conn *websocket.Conn) {
		if !send(conn, followFrame) {
			return
		}
		if _, err := conn.UnderlyingConn().Write(raw); err != nil {
			return
		}
		if send(conn, postFrame) {
			holdOpen(conn)
		}
	})
	h := startClient(t, Config{URLs: []string{srv.url}, Compression: true}, fixed(Position{}), 10)
	if ev := h.next(t); ev.TimeUS != 1795975616983633 {
		t.Fatalf("first event %+v, want the follow", ev)
	}
	for i := 0; ; i++ {
		ev := h.next(t)
		if ev.TimeUS == 1795975616991124 {
			break
		}
		if i == 3 {
			t.Fatalf("the post after the corrupt frame never came (last %+v, %d dials)", ev, len(srv.dials()))
		}
	}
	if got := testutil.ToFloat64(h.metrics.dropped.WithLabelValues(ReasonBadCompression)); got != 1 {
		t.Errorf("dropped{%s} = %v, want 1", ReasonBadCompression, got)
	}
	if n := len(srv.dials()); n != 1 {
		t.Errorf("%d dials, want 1: a corrupt message must not cost the connection", n)
	}
}
