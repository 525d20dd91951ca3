package replay

import (
	"bytes"
	"context"
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/atfeeds/appview/workload"
)

func smallWorkload(t *testing.T) *workload.Workload {
	t.Helper()
	cfg := workload.DefaultConfig()
	cfg.Accounts, cfg.Viewers, cfg.Follows = 2000, 100, 20
	w, err := workload.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// logOf writes the first n stream frames to a log and returns it with
// copies of the frames.
func logOf(t *testing.T, s *workload.Stream, n int) ([]byte, []workload.Frame) {
	t.Helper()
	var buf bytes.Buffer
	lw := workload.NewLogWriter(&buf)
	var frames []workload.Frame
	for range n {
		f := s.Next()
		if err := lw.Write(f); err != nil {
			t.Fatal(err)
		}
		f.Data = bytes.Clone(f.Data)
		frames = append(frames, f)
	}
	if err := lw.Flush(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), frames
}

func startServer(t *testing.T, src Source) *Server {
	t.Helper()
	s, err := NewServer(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func dial(t *testing.T, url string, compress bool) *websocket.Conn {
	t.Helper()
	conn := dialB(t, url, compress)
	t.Cleanup(func() { conn.Close() })
	return conn
}

func dialB(tb testing.TB, url string, compress bool) *websocket.Conn {
	tb.Helper()
	d := *websocket.DefaultDialer
	d.EnableCompression = compress
	conn, resp, err := d.Dial(url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	resp.Body.Close()
	return conn
}

func read(t *testing.T, conn *websocket.Conn) []byte {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	typ, data, err := conn.ReadMessage()
	if err != nil {
		t.Fatal(err)
	}
	if typ != websocket.TextMessage {
		t.Fatalf("message type %d, want text", typ)
	}
	return data
}

func TestPlaylistOverWebsocket(t *testing.T) {
	for _, compress := range []bool{false, true} {
		t.Run("compress="+strconv.FormatBool(compress), func(t *testing.T) {
			w := smallWorkload(t)
			s := w.Stream()
			log, frames := logOf(t, s, 500)
			p := NewPlaylist(Log(bytes.NewReader(log)))
			srv := startServer(t, p)
			conn := dial(t, srv.URL(), compress)
			for i, f := range frames {
				if got := read(t, conn); !bytes.Equal(got, f.Data) {
					t.Fatalf("frame %d: got %q, want %q", i, got, f.Data)
				}
			}
			if srv.Compressed() != compress {
				t.Errorf("Compressed() = %v, want %v", srv.Compressed(), compress)
			}
			// The log is exhausted: the playlist waits until more is added,
			// and the live generator continues the same stream.
			p.Add(Stream(s, 3))
			_, more := logOf(t, w.Stream(), 503)
			for i := range 3 {
				if got := read(t, conn); !bytes.Equal(got, more[500+i].Data) {
					t.Fatalf("live frame %d: got %q, want %q", i, got, more[500+i].Data)
				}
			}
			// The server counts a frame once its write returns, which can
			// be after the client has read it.
			for deadline := time.Now().Add(5 * time.Second); srv.Sent() < 503 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			if srv.Sent() != 503 || srv.Connections() != 1 {
				t.Errorf("sent %d on %d connections, want 503 on 1", srv.Sent(), srv.Connections())
			}
		})
	}
}

func TestCursorSkipsOlderFrames(t *testing.T) {
	w := smallWorkload(t)
	log, frames := logOf(t, w.Stream(), 100)
	srv := startServer(t, Log(bytes.NewReader(log)))
	cursor := frames[60].TimeUS
	conn := dial(t, srv.URL()+"?cursor="+strconv.FormatInt(cursor, 10), false)
	first := read(t, conn)
	for _, f := range frames {
		if f.TimeUS >= cursor {
			if !bytes.Equal(first, f.Data) {
				t.Fatalf("first frame after cursor: got %q, want %q", first, f.Data)
			}
			return
		}
	}
}

func TestThrottle(t *testing.T) {
	w := smallWorkload(t)
	src := Throttle(Stream(w.Stream(), -1), 200)
	start := time.Now()
	for range 21 {
		if _, err := src.Next(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// 21 frames at 200/s: the last leaves 100 ms after the first.
	if took := time.Since(start); took < 95*time.Millisecond {
		t.Fatalf("21 frames at 200/s took %v", took)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	slow := Throttle(Stream(w.Stream(), -1), 0.001)
	slow.Next(ctx) // the first frame leaves at once
	if _, err := slow.Next(ctx); err == nil {
		t.Fatal("a throttled wait ignored a cancelled context")
	}
}

func TestNotFound(t *testing.T) {
	srv := startServer(t, NewPlaylist())
	res, err := http.Get("http" + srv.URL()[2:len(srv.URL())-len("subscribe")] + "other")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Fatalf("status %d, want 404", res.StatusCode)
	}
}

// A rate of 0 made the interval overflow, and the stream came unpaced: a
// bench asked for reads with no ingest got a full-speed catch-up instead.
func TestThrottleRefusesARateThatIsNotPositive(t *testing.T) {
	w := smallWorkload(t)
	for _, rate := range []float64{0, -1, math.NaN(), 1e-12} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Throttle(%v) did not panic", rate)
				}
			}()
			Throttle(Stream(w.Stream(), -1), rate)
		}()
	}
}
