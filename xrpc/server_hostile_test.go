package xrpc

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/atfeeds/appview/feeds"
)

// TestServerTimeoutDefaults pins the values a public listener runs with:
// the knob exists for tests, the defaults are the product.
func TestServerTimeoutDefaults(t *testing.T) {
	s := NewServer(testConfig(newFakeReader()))
	h := s.http
	if h.ReadHeaderTimeout != 5*time.Second || h.ReadTimeout != 10*time.Second ||
		h.WriteTimeout != 15*time.Second || h.IdleTimeout != 60*time.Second {
		t.Errorf("timeouts: header %s, read %s, write %s, idle %s; want 5s, 10s, 15s, 60s",
			h.ReadHeaderTimeout, h.ReadTimeout, h.WriteTimeout, h.IdleTimeout)
	}
	if h.MaxHeaderBytes != 256<<10 {
		t.Errorf("MaxHeaderBytes %d, want 256 KiB", h.MaxHeaderBytes)
	}
	cfg := testConfig(newFakeReader())
	cfg.Timeouts = Timeouts{ReadHeader: time.Second}
	if h := NewServer(cfg).http; h.ReadHeaderTimeout != time.Second || h.ReadTimeout != 10*time.Second {
		t.Errorf("a partial override: header %s, read %s", h.ReadHeaderTimeout, h.ReadTimeout)
	}
}

// TestSlowlorisIsCutOff: clients that dribble header bytes, one every
// 20ms, are disconnected once the read-header timeout passes, however
// steadily they send, and meanwhile other clients are served.
func TestSlowlorisIsCutOff(t *testing.T) {
	const headerTimeout = 200 * time.Millisecond
	cfg := testConfig(goldenReader())
	cfg.Timeouts = Timeouts{ReadHeader: headerTimeout}
	base := serve(t, cfg)
	addr := strings.TrimPrefix(base, "http://")

	const clients = 20
	type result struct {
		held time.Duration
		err  error
	}
	results := make(chan result, clients)
	for range clients {
		go func() {
			held, err := dribble(addr, 20*time.Millisecond, 10*time.Second)
			results <- result{held, err}
		}()
	}
	// While they dribble, an honest client gets its answer.
	time.Sleep(headerTimeout / 2)
	if res := do(t, http.MethodGet, base+getFeedURL+"?feed=following&actor="+string(alice)); res.Status != http.StatusOK {
		t.Errorf("honest client during the attack: status %d", res.Status)
	}
	for range clients {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		// Not well before the timeout (the server's clock starts at
		// accept, the client's a scheduling delay later on a loaded
		// machine), and well before the 10s the client would keep going.
		if r.held < headerTimeout/2 || r.held > 5*time.Second {
			t.Errorf("connection held for %s, want about %s", r.held, headerTimeout)
		}
	}
	if res := do(t, http.MethodGet, base+"/xrpc/_health"); res.Status != http.StatusOK {
		t.Errorf("after the attack: status %d", res.Status)
	}
}

// dribble opens a connection, sends a request line and then one header
// byte per interval, and returns how long the server kept the connection
// open. It fails if the server answers anything or never hangs up.
func dribble(addr string, interval, giveUp time.Duration) (time.Duration, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	start := time.Now()
	closed := make(chan error, 1)
	go func() {
		// The server hangs up without a word: a timeout is a common
		// network read error, answered with nothing, so the read's own
		// error says nothing; only what it read counts.
		b, _ := io.ReadAll(conn)
		var err error
		if len(b) > 0 {
			err = errors.New("server answered a half-sent request: " + string(b))
		}
		closed <- err
	}()
	if _, err := io.WriteString(conn, "GET /xrpc/_health HTTP/1.1\r\nHost: localhost\r\nX-Slow: "); err != nil {
		return 0, err
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	deadline := time.After(giveUp)
	for {
		select {
		case err := <-closed:
			return time.Since(start), err
		case <-deadline:
			return time.Since(start), errors.New("server never hung up on a dribbling client")
		case <-tick.C:
			// A write error means the server is gone; the reader reports it.
			_, _ = conn.Write([]byte("a"))
		}
	}
}

// TestQueryWithBody: a query carrying a body is refused with 400 whether
// the body is declared by length or chunked; an explicit empty body is
// no body.
func TestQueryWithBody(t *testing.T) {
	base := serve(t, testConfig(goldenReader()))
	addr := strings.TrimPrefix(base, "http://")
	target := getFeedURL + "?feed=following&actor=" + string(alice)
	tests := []struct {
		name   string
		raw    string
		status int
	}{
		{"content-length", "GET " + target + " HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", 400},
		{"chunked", "GET " + target + " HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 400},
		{"health with body", "GET /xrpc/_health HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", 400},
		{"empty body", "GET " + target + " HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := rawRequest(t, addr, tt.raw)
			if status != tt.status {
				t.Fatalf("status %d, want %d: %s", status, tt.status, body)
			}
			if tt.status == 400 {
				env := decodeEnvelope(t, body)
				if env.Error != "InvalidRequest" || !strings.Contains(env.Message, "body") {
					t.Errorf("envelope %+v", env)
				}
			}
		})
	}
}

// rawRequest writes raw to a fresh connection and reads one response.
func rawRequest(t *testing.T, addr, raw string) (int, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		// Written concurrently: the server may answer (and stop reading)
		// before a large request is all sent.
		defer wg.Done()
		io.WriteString(conn, raw)
	}()
	defer wg.Wait()
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, body
}

// TestShutdownWithSilentConnections: connections that never send a
// request, or only half of one, do not hold a graceful shutdown (net/http
// alone waits for them until they have been silent for 5s), while a
// request in flight is still answered.
func TestShutdownWithSilentConnections(t *testing.T) {
	r := &blockingReader{next: goldenReader(), entered: make(chan struct{}, 1), release: make(chan struct{})}
	s := NewServer(testConfig(r))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	addr := l.Addr().String()

	var conns []net.Conn
	for i := range 5 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if i%2 == 1 {
			io.WriteString(c, "GET /xrpc/_health HTTP/1.1\r\nHost: x\r\n")
		}
		conns = append(conns, c)
	}
	// A request whose reader is slow is in flight during the shutdown.
	inFlight := make(chan int, 1)
	go func() {
		res, err := http.Get("http://" + addr + getFeedURL + "?feed=following&actor=" + string(alice))
		if err != nil {
			inFlight <- 0
			return
		}
		res.Body.Close()
		inFlight <- res.StatusCode
	}()
	select {
	case <-r.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("request never reached the reader")
	}

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(ctx) }()
	time.Sleep(50 * time.Millisecond)
	close(r.release)
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v after %s", err, time.Since(start))
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("shutdown took %s", took)
	}
	if status := <-inFlight; status != http.StatusOK {
		t.Errorf("request in flight: status %d, want 200", status)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(time.Second))
		if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
			t.Errorf("silent connection still open: %d, %v", n, err)
		}
	}
}

// blockingReader holds every read until release is closed.
type blockingReader struct {
	next    FeedReader
	entered chan struct{}
	release chan struct{}
}

func (b *blockingReader) ReadFeed(ctx context.Context, q feeds.PageQuery) (feeds.Page, error) {
	select {
	case b.entered <- struct{}{}:
	default:
	}
	<-b.release
	return b.next.ReadFeed(ctx, q)
}

// ctxReader holds every read until its request's context ends, as a slow
// upstream call would, and says when it has returned.
type ctxReader struct {
	entered  chan struct{}
	returned atomic.Bool
}

func (r *ctxReader) ReadFeed(ctx context.Context, q feeds.PageQuery) (feeds.Page, error) {
	r.entered <- struct{}{}
	<-ctx.Done()
	time.Sleep(50 * time.Millisecond) // still at work a moment after
	r.returned.Store(true)
	return feeds.Page{}, ctx.Err()
}

// A handler still running when the shutdown's time is up does not fail
// the shutdown: its connection is closed, which ends its request, and
// Shutdown returns once it has returned, so nothing runs on after the
// caller closes the store.
func TestShutdownPastItsDeadlineEndsTheHandlers(t *testing.T) {
	r := &ctxReader{entered: make(chan struct{}, 1)}
	s := NewServer(testConfig(r))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	go func() {
		if res, err := http.Get("http://" + l.Addr().String() + getFeedURL + "?feed=following&actor=" + string(alice)); err == nil {
			res.Body.Close()
		}
	}()
	<-r.entered
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if !r.returned.Load() {
		t.Error("Shutdown returned while a handler was still running")
	}
}
