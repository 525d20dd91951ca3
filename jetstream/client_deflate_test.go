package jetstream

import (
	"bytes"
	"compress/flate"
	"testing"
	"time"

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
	srv := serveBetweenEvents(t, raw)
	h := startClient(t, Config{URLs: []string{srv.url}, Compression: true}, fixed(Position{}), 10)
	h.waitFollowThenPost(t, srv, "corrupt frame")
	if got := testutil.ToFloat64(h.metrics.dropped.WithLabelValues(ReasonBadCompression)); got != 1 {
		t.Errorf("dropped{%s} = %v, want 1", ReasonBadCompression, got)
	}
	if n := len(srv.dials()); n != 1 {
		t.Errorf("%d dials, want 1: a corrupt message must not cost the connection", n)
	}
}

// deflateBomb is permessage-deflate payload that inflates to about n
// bytes of zeros: a sync-flushed chunk of a megabyte of zeros repeated.
// Each chunk ends byte-aligned on an empty stored block, and refers back
// only to zeros, so the chunks concatenate.
func deflateBomb(t *testing.T, n int64) []byte {
	t.Helper()
	var chunk bytes.Buffer
	w, err := flate.NewWriter(&chunk, flate.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	const per = 1 << 20
	if _, err := w.Write(make([]byte, per)); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return bytes.Repeat(chunk.Bytes(), int(n/per))
}

// rawFrame is a server's unmasked websocket frame header and payload.
func rawFrame(b0 byte, payload []byte) []byte {
	var h []byte
	switch n := len(payload); {
	case n < 126:
		h = []byte{b0, byte(n)}
	case n < 1<<16:
		h = []byte{b0, 126, byte(n >> 8), byte(n)}
	default:
		h = []byte{b0, 127, 0, 0, 0, 0, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	}
	return append(h, payload...)
}

// An oversized compressed message is not inflated to its end: its rest is
// skipped as it came, compressed. Inflating it to discard it let a small
// message (a few megabytes of deflate) cost gigabytes of work: past the
// read timeout the session ended, and every reconnect replayed it.
func TestClientDoesNotInflateTheRestOfAnOversizedFrame(t *testing.T) {
	bomb := rawFrame(0xc1, deflateBomb(t, 4<<30))
	srv := serveBetweenEvents(t, bomb)
	cfg := Config{URLs: []string{srv.url}, Compression: true, MaxFrameBytes: 1 << 20, ReadTimeout: time.Second}
	h := startClient(t, cfg, fixed(Position{}), 10)
	h.waitFollowThenPost(t, srv, "oversized frame")
	if got := testutil.ToFloat64(h.metrics.dropped.WithLabelValues(ReasonFrameTooLarge)); got != 1 {
		t.Errorf("dropped{%s} = %v, want 1", ReasonFrameTooLarge, got)
	}
	if n := len(srv.dials()); n != 1 {
		t.Errorf("%d dials, want 1", n)
	}
}

// A corrupt compressed message that never ends, pinging between its
// frames, still ends the session at ReadTimeout: the rest of the message
// is skipped under its own deadline.
func TestClientEndlessCorruptCompressedFrameEndsTheSession(t *testing.T) {
	srv := newFakeServer(t, func(n int, conn *websocket.Conn) {
		if n > 0 {
			holdOpen(conn)
			return
		}
		raw := conn.UnderlyingConn()
		if _, err := raw.Write(rawFrame(0x41, []byte{0xff, 0xff})); err != nil {
			return
		}
		chunk := rawFrame(0x00, bytes.Repeat([]byte{0xff}, 8<<10))
		for {
			if _, err := raw.Write(chunk); err != nil {
				return
			}
			if _, err := raw.Write([]byte{0x89, 0x00}); err != nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	startClient(t, Config{URLs: []string{srv.url}, Compression: true, ReadTimeout: 200 * time.Millisecond}, fixed(Position{}), 10)
	waitFor(t, "a redial after the endless message's read timeout", func() bool { return len(srv.dials()) >= 2 })
}

// serveBetweenEvents serves a follow, then raw written as it is (a frame
// built by hand), then a post, and holds the connection open.
func serveBetweenEvents(t *testing.T, raw []byte) *fakeServer {
	t.Helper()
	return newFakeServer(t, func(n int, conn *websocket.Conn) {
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
}

// waitFollowThenPost checks the client hands over serveBetweenEvents'
// follow, then its post, within a few events: what came between did not
// stall the stream.
func (h *harness) waitFollowThenPost(t *testing.T, srv *fakeServer, between string) {
	t.Helper()
	if ev := h.next(t); ev.TimeUS != 1795975616983633 {
		t.Fatalf("first event %+v, want the follow", ev)
	}
	for i := 0; ; i++ {
		ev := h.next(t)
		if ev.TimeUS == 1795975616991124 {
			return
		}
		if i == 3 {
			t.Fatalf("the post after the %s never came (last %+v, %d dials)", between, ev, len(srv.dials()))
		}
	}
}
