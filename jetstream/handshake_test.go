package jetstream

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// An endpoint that answers the upgrade with headers that never end (a
// broken proxy, a hostile host) used to have all it sent held in memory
// for the whole handshake timeout: gorilla parses the response with
// net/http, which bounds nothing on the client side. The dial now fails
// once 64 KiB came before the upgrade, at once, and counts a dial error.
func TestAHandshakeWithEndlessHeadersFailsAt64KiB(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	sent := make(chan int, 1)
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		if _, err := http.ReadRequest(bufio.NewReader(conn)); err != nil {
			sent <- 0
			return
		}
		n, _ := conn.Write([]byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"))
		line := []byte("X-Junk: " + strings.Repeat("a", 1000) + "\r\n")
		// Up to 64 MiB, or until the client hangs up.
		for n < 64<<20 {
			m, err := conn.Write(line)
			n += m
			if err != nil {
				break
			}
		}
		sent <- n
	}()
	metrics := NewMetrics(prometheus.NewRegistry(), nil)
	c := NewClient(Config{URLs: []string{"ws://" + l.Addr().String() + "/subscribe"}}, testDecoder(), slog.New(slog.DiscardHandler), metrics)
	start := time.Now()
	_, err = c.session(context.Background(), c.cfg.URLs[0], Position{}, 0, c.generation(), make(chan Event, 1))
	took := time.Since(start)
	if !errors.Is(err, errHandshakeTooLarge) {
		t.Fatalf("dial error %v, want %v", err, errHandshakeTooLarge)
	}
	if took > 5*time.Second {
		t.Errorf("the dial took %s to fail, want well under the handshake timeout", took)
	}
	if got := testutil.ToFloat64(metrics.dialErrors); got != 1 {
		t.Errorf("dial errors %v, want 1", got)
	}
	// The client hung up: the server could not write the 64 MiB (the
	// socket buffers hold a few MiB at most).
	if n := <-sent; n >= 64<<20 {
		t.Errorf("the server wrote %d bytes: the client kept reading", n)
	}
}

// The bound is the handshake's only: once upgraded, a session reads
// frames well past 64 KiB.
func TestTheHandshakeBoundIsLiftedAfterTheUpgrade(t *testing.T) {
	const frames = 200 // about 240 KiB
	srv := newFakeServer(t, func(n int, conn *websocket.Conn) {
		for i := range frames {
			us := strconv.FormatInt(1795975616991124+int64(i), 10)
			if !send(conn, strings.Replace(postFrame, "1795975616991124", us, 1)+strings.Repeat(" ", 1000)) {
				return
			}
		}
		holdOpen(conn)
	})
	h := startClient(t, Config{URLs: []string{srv.url}}, fixed(Position{}), frames)
	for i := range frames {
		if ev := h.next(t); ev.TimeUS != 1795975616991124+int64(i) {
			t.Fatalf("event %d at %d, want %d", i, ev.TimeUS, 1795975616991124+int64(i))
		}
	}
	if n := len(srv.dials()); n != 1 {
		t.Errorf("%d dials, want the one session", n)
	}
}
