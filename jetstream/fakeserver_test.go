package jetstream

import (
	"context"
	"github.com/atfeeds/appview/internal/syncbuf"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
)

// fakeServer is a scripted Jetstream on 127.0.0.1. Each accepted
// connection runs script with its 0-based index; when script returns the
// connection is closed abruptly (no close frame), as a legacy server does.
type fakeServer struct {
	url string
	srv *httptest.Server

	mu         sync.Mutex
	queries    []url.Values
	exts       []string // Sec-WebSocket-Extensions offered on each dial
	accepted   int
	refuse     int // answer every dial with this status instead of upgrading
	refuseBody string
}

func newFakeServer(t *testing.T, script func(n int, conn *websocket.Conn)) *fakeServer {
	t.Helper()
	return newFakeServerQ(t, func(n int, _ url.Values, conn *websocket.Conn) { script(n, conn) })
}

// newFakeServerQ is newFakeServer whose script also gets the dial's own
// query: where dials overlap, n (the order of upgrades) and the order of
// dials() may differ.
func newFakeServerQ(t *testing.T, script func(n int, q url.Values, conn *websocket.Conn)) *fakeServer {
	t.Helper()
	s := &fakeServer{}
	up := websocket.Upgrader{EnableCompression: true}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.queries = append(s.queries, r.URL.Query())
		s.exts = append(s.exts, r.Header.Get("Sec-WebSocket-Extensions"))
		status, body := s.refuse, s.refuseBody
		s.mu.Unlock()
		if status != 0 {
			http.Error(w, body, status)
			return
		}
		conn, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		s.mu.Lock()
		n := s.accepted
		s.accepted++
		s.mu.Unlock()
		script(n, r.URL.Query(), conn)
	}))
	t.Cleanup(s.srv.Close)
	s.url = "ws" + strings.TrimPrefix(s.srv.URL, "http") + "/subscribe"
	return s
}

func (s *fakeServer) refuseWith(status int, body string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse, s.refuseBody = status, body
}

func (s *fakeServer) dials() []url.Values {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]url.Values(nil), s.queries...)
}

func (s *fakeServer) extensions() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.exts, ";")
}

// send writes text frames, reporting whether all were written.
func send(conn *websocket.Conn, frames ...string) bool {
	for _, f := range frames {
		if conn.WriteMessage(websocket.TextMessage, []byte(f)) != nil {
			return false
		}
	}
	return true
}

// holdOpen keeps a connection open until the client goes away.
func holdOpen(conn *websocket.Conn) {
	for {
		if _, _, err := conn.ReadMessage(); err != nil {
			return
		}
	}
}

// harness runs a Client against fake servers with instant backoff.
type harness struct {
	client  *Client
	metrics *Metrics
	logs    *syncbuf.Buffer
	out     chan Event
	cancel  context.CancelFunc
	done    chan error

	mu     sync.Mutex
	sleeps []time.Duration
}

func startClient(t *testing.T, cfg Config, resume func() Position, outCap int) *harness {
	t.Helper()
	return startClientSleeping(t, cfg, resume, outCap, func(ctx context.Context, _ time.Duration) error { return ctx.Err() })
}

// startClientSleeping is startClient whose backoff waits are sleep's
// (which the harness still records).
func startClientSleeping(t *testing.T, cfg Config, resume func() Position, outCap int, sleep func(context.Context, time.Duration) error) *harness {
	t.Helper()
	h := &harness{
		logs: &syncbuf.Buffer{},
		out:  make(chan Event, outCap),
		done: make(chan error, 1),
	}
	h.metrics = NewMetrics(prometheus.NewRegistry(), cfg.WantedCollections)
	logger := slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h.client = NewClient(cfg, testDecoder(), logger, h.metrics)
	h.client.jitter = func() float64 { return 0.5 }
	h.client.sleep = func(ctx context.Context, d time.Duration) error {
		h.mu.Lock()
		h.sleeps = append(h.sleeps, d)
		h.mu.Unlock()
		return sleep(ctx, d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- h.client.Run(ctx, resume, h.out) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-h.done:
		case <-time.After(5 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
	return h
}

func (h *harness) next(t *testing.T) Event {
	t.Helper()
	select {
	case ev := <-h.out:
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("timed out waiting for an event")
		return Event{}
	}
}

func (h *harness) sleepsSoFar() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Duration(nil), h.sleeps...)
}

// stop cancels the client and fails unless Run returns nil within limit.
func (h *harness) stop(t *testing.T, limit time.Duration) {
	t.Helper()
	h.cancel()
	select {
	case err := <-h.done:
		if err != nil {
			t.Fatalf("Run returned %v after cancel", err)
		}
		h.done <- nil // let the cleanup see it too
	case <-time.After(limit):
		t.Fatalf("Run did not return within %v of cancel", limit)
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

func fixed(pos Position) func() Position {
	return func() Position { return pos }
}
