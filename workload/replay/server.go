// Package replay is a fake Jetstream server for benchmarks: it plays
// workload frames from a Source (a frame log on disk, a live generator, a
// throttled mix of both) to one subscriber at a time, as fast as the
// subscriber reads. Unlike jetstreamtest it holds no frame in memory beyond
// the one being written, so a stream of millions of frames costs nothing
// but the file it is read from.
package replay

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/atfeeds/appview/workload"
)

// Source yields the frames to send. Next blocks until a frame is ready;
// the frame's Data must stay valid until the next call. io.EOF means the
// source is exhausted: the server then keeps the connection open, idle,
// like a live tip with nothing new.
type Source interface {
	Next(ctx context.Context) (workload.Frame, error)
}

// pingInterval is how often the server pings, as Jetstream does.
const pingInterval = 30 * time.Second

// Server serves /subscribe on a loopback listener.
type Server struct {
	src      Source
	log      *slog.Logger
	upgrader websocket.Upgrader
	http     *http.Server
	listener net.Listener
	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{}

	// serving is held by the connection that pulls from src, so a
	// reconnecting client continues where the source stands.
	serving sync.Mutex

	// rewind keeps the frames sent last, for a client that reconnects
	// with a cursor; only the serving connection uses it.
	rewind *rewindLog

	sent        atomic.Int64
	replayed    atomic.Int64
	gaps        atomic.Int64
	connections atomic.Int64
	compressed  atomic.Bool
}

// NewServer listens on 127.0.0.1 and serves src. logger may be nil.
func NewServer(src Source, logger *slog.Logger) (*Server, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	rewind, err := newRewindLog("", rewindBytes, rewindFrames)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		rewind.close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		src:      src,
		rewind:   rewind,
		log:      logger.With("component", "replay"),
		listener: l,
		ctx:      ctx,
		cancel:   cancel,
		done:     make(chan struct{}),
	}
	// Whether frames are compressed is the client's choice, as with
	// Jetstream v2: permessage-deflate when the client offers it.
	s.upgrader.EnableCompression = true
	s.http = &http.Server{
		Handler:           http.HandlerFunc(s.subscribe),
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	go func() {
		defer close(s.done)
		if err := s.http.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("serve", "err", err)
		}
	}()
	return s, nil
}

// URL is the websocket subscribe URL.
func (s *Server) URL() string { return "ws://" + s.listener.Addr().String() + "/subscribe" }

// Sent is how many frames have been written to subscribers.
func (s *Server) Sent() int64 { return s.sent.Load() }

// Replayed is how many frames were sent again to a client that
// reconnected with a cursor.
func (s *Server) Replayed() int64 { return s.replayed.Load() }

// Gaps is how many reconnects asked for a cursor older than the frames
// the server still kept: frames at or after it were lost to that client,
// and a benchmark's figures are not valid.
func (s *Server) Gaps() int64 { return s.gaps.Load() }

// Connections is how many subscriptions have been accepted.
func (s *Server) Connections() int64 { return s.connections.Load() }

// Compressed reports whether the last subscription negotiated
// permessage-deflate.
func (s *Server) Compressed() bool { return s.compressed.Load() }

// Close ends every connection and stops the server.
func (s *Server) Close() error {
	s.cancel()
	err := s.http.Close()
	<-s.done
	// Closing the listener does not wait for hijacked connections: the
	// one serving (cancelled above) may still be writing to the rewind log.
	s.serving.Lock()
	defer s.serving.Unlock()
	if cerr := s.rewind.close(); err == nil {
		err = cerr
	}
	return err
}

func (s *Server) subscribe(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/subscribe" {
		http.NotFound(w, r)
		return
	}
	// A time_us cursor (≥ 1e15) replays the frames sent since that time
	// (rewindLog) and skips older ones; anything else plays from where the
	// source stands.
	var cursor int64
	if c, err := strconv.ParseInt(r.URL.Query().Get("cursor"), 10, 64); err == nil && c >= 1e15 {
		cursor = c
	}
	offered := strings.Contains(r.Header.Get("Sec-WebSocket-Extensions"), "permessage-deflate")
	conn, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer conn.Close()
	s.connections.Add(1)
	s.compressed.Store(offered)

	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	// A write blocked on a client that stopped reading ends when the
	// server closes (Close waits for this handler).
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	go func() { // notice the client leaving; answer its pings
		defer cancel()
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	}()
	go func() {
		t := time.NewTicker(pingInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(5*time.Second))
			}
		}
	}()

	s.serving.Lock()
	defer s.serving.Unlock()
	if cursor > 0 {
		if err := s.replay(conn, cursor); err != nil {
			s.log.Warn("subscriber gone during its replay", "err", err)
			return
		}
	}
	for {
		f, err := s.src.Next(ctx)
		if errors.Is(err, io.EOF) {
			<-ctx.Done()
			return
		}
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("read source", "err", err)
			}
			return
		}
		if f.TimeUS < cursor {
			continue
		}
		if err := s.rewind.add(f); err != nil {
			s.log.Error("keep frame", "err", err)
			return
		}
		if err := conn.WriteMessage(websocket.TextMessage, f.Data); err != nil {
			s.log.Warn("subscriber gone", "err", err, "sent", s.sent.Load())
			return
		}
		s.sent.Add(1)
	}
}

// rewindBytes and rewindFrames bound the rewind log: more than a client's
// rewind (5 s of stream time, 5,000 workload frames) and the frames in
// flight in two sockets' buffers together.
const (
	rewindBytes  = 64 << 20
	rewindFrames = 1 << 16
)

// replay sends the kept frames at or after cursor again.
func (s *Server) replay(conn *websocket.Conn, cursor int64) error {
	entries, gap := s.rewind.since(cursor)
	if gap {
		s.gaps.Add(1)
		s.log.Warn("reconnect cursor older than the frames kept", "cursor", cursor)
	}
	for _, e := range entries {
		if e.timeUS < cursor {
			continue
		}
		f, err := s.rewind.read(e)
		if err != nil {
			return err
		}
		if err := conn.WriteMessage(websocket.TextMessage, f.Data); err != nil {
			return err
		}
		s.replayed.Add(1)
	}
	return nil
}
