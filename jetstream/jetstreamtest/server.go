// Package jetstreamtest is a scripted stand-in for a Jetstream server on
// 127.0.0.1, for tests, crash runs and benchmarks. Like the real server it
// replays from the cursor a client sends (a time_us, inclusive) and then
// streams frames as they are appended.
package jetstreamtest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Server serves /subscribe from an in-memory log of frames.
type Server struct {
	srv      *httptest.Server
	upgrader websocket.Upgrader

	mu      sync.Mutex
	frames  []frame
	changed chan struct{} // closed and replaced whenever frames grow
	queries []url.Values
	// dropAfter closes a connection, without a close frame, after it has
	// sent this many frames; 0 never drops.
	dropAfter int
}

type frame struct {
	timeUS int64
	data   []byte
}

// NewServer starts a server; Close it when done.
func NewServer() *Server {
	s := &Server{changed: make(chan struct{})}
	s.upgrader.EnableCompression = true
	s.srv = httptest.NewServer(http.HandlerFunc(s.subscribe))
	return s
}

// URL is the websocket subscribe URL.
func (s *Server) URL() string {
	return "ws" + strings.TrimPrefix(s.srv.URL, "http") + "/subscribe"
}

// Close stops the server and ends every connection.
func (s *Server) Close() {
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// DropEvery makes every connection end abruptly after n frames, as a
// flaky network or an overloaded server would; 0 turns it off.
func (s *Server) DropEvery(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropAfter = n
}

// Append adds frames to the log. A frame's time_us is read from its JSON;
// a frame without one (junk) takes the time of the frame before it.
func (s *Server) Append(frames ...[]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, data := range frames {
		var head struct {
			TimeUS int64 `json:"time_us"`
		}
		_ = json.Unmarshal(data, &head)
		if head.TimeUS == 0 && len(s.frames) > 0 {
			head.TimeUS = s.frames[len(s.frames)-1].timeUS
		}
		s.frames = append(s.frames, frame{timeUS: head.TimeUS, data: data})
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// Queries returns the query of every subscribe request so far, in order.
func (s *Server) Queries() []url.Values {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]url.Values(nil), s.queries...)
}

// WaitConnections blocks until n subscribe requests have arrived or the
// timeout passes, and reports whether they did.
func (s *Server) WaitConnections(n int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		s.mu.Lock()
		got := len(s.queries)
		s.mu.Unlock()
		if got >= n {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
}

func (s *Server) subscribe(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/subscribe" {
		http.NotFound(w, r)
		return
	}
	// The replay start is fixed before the request is recorded, so a
	// test that waits for the connection and then appends never races it.
	next := s.start(r.URL.Query().Get("cursor"))
	s.mu.Lock()
	s.queries = append(s.queries, r.URL.Query())
	dropAfter := s.dropAfter
	s.mu.Unlock()
	conn, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer conn.Close()
	gone := make(chan struct{})
	go func() { // notice the client leaving
		defer close(gone)
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	}()

	sent := 0
	for {
		s.mu.Lock()
		pending := s.frames[next:]
		changed := s.changed
		s.mu.Unlock()
		for _, f := range pending {
			if err := conn.WriteMessage(websocket.TextMessage, f.data); err != nil {
				return
			}
			next++
			sent++
			if dropAfter > 0 && sent >= dropAfter {
				return // no close frame: an abrupt drop
			}
		}
		select {
		case <-changed:
		case <-gone:
			return
		}
	}
}

// start finds the first frame at or after the cursor, as Jetstream replays
// inclusively; no cursor starts at the live tip.
func (s *Server) start(cursor string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cursor == "" {
		return len(s.frames)
	}
	c, err := strconv.ParseInt(cursor, 10, 64)
	if err != nil {
		return len(s.frames)
	}
	// A linear scan, not a binary search: a test log may re-send an old
	// frame later (a duplicate delivery), so times need not be sorted.
	for i, f := range s.frames {
		if f.timeUS >= c {
			return i
		}
	}
	return len(s.frames)
}
