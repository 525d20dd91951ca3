package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"golang.org/x/sync/semaphore"
)

// DefaultRewind is the rewind of a Config that leaves it zero or negative.
const DefaultRewind = 5 * time.Second

// MaxMaxFrameBytes bounds Config.MaxFrameBytes: a frame is buffered whole
// up to it, and an event is a few hundred bytes (a record at most a few
// KiB).
const MaxMaxFrameBytes = 64 << 20

const (
	defaultMaxFrameBytes = 1 << 20
	defaultReadTimeout   = 60 * time.Second
	defaultMinBackoff    = 250 * time.Millisecond
	defaultMaxBackoff    = 30 * time.Second
	handshakeTimeout     = 10 * time.Second
	// maxStalledSessions is how many sessions in a row may deliver only
	// replays before the client fails over to the next URL.
	maxStalledSessions = 3
)

// Config says where and how to subscribe. Zero values take the defaults
// noted on each field.
type Config struct {
	// URLs are ws(s)://host/subscribe endpoints: the first is preferred,
	// the rest are failover.
	URLs []string
	// WantedCollections are sent as repeated wantedCollections params
	// (exact NSIDs or "prefix.*"). Identity and account events arrive
	// regardless.
	WantedCollections []string
	// Rewind is subtracted from a time_us cursor on reconnect, because
	// time_us is not unique, is not sent in order across DIDs, and hosts
	// differ slightly; default 5s. A same-host reconnect may rewind less
	// (see resumeFrom).
	Rewind time.Duration
	// Compression offers permessage-deflate, which v2 servers accept.
	Compression bool
	// MaxFrameBytes caps a frame after decompression; default 1 MiB, at
	// most MaxMaxFrameBytes. A larger frame is read to its end and
	// discarded, not buffered.
	MaxFrameBytes int64
	// ReadTimeout ends a session that receives no frame, ping or pong for
	// this long, or only malformed frames; default 60s (servers ping every
	// 30s).
	ReadTimeout time.Duration
	// IdleTimeout ends a session that hands over no event for this long,
	// though the server's pings keep its connection alive, and tries the
	// next URL. Jetstream sends identity and account events whatever the
	// filter, every second or so on the real network, so a silent host is
	// a stalled one. 0 never ends a session for it.
	IdleTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait between dials; default
	// 250ms and 30s.
	MinBackoff, MaxBackoff time.Duration
	// StallTimeout is how long a session waits for room in the caller's
	// queue (out, QueueBytes) before it steps away: it closes its
	// connection, waits for room without one, and resumes from the newest
	// event it handed over. A session waiting does not read, so it answers
	// no ping, and Jetstream drops a client that leaves one unanswered for
	// 5 s. Default 3 s; negative never steps away.
	StallTimeout time.Duration
	// UserAgent, if set, is sent with the websocket handshake.
	UserAgent string
	// OnSessionEnd, when set, is told how every session that connected
	// went (for the operator's record of sync runs).
	OnSessionEnd func(SessionReport)
	// Dialer is optional; Compression overrides its EnableCompression.
	Dialer *websocket.Dialer
	// QueueBytes, when set, bounds the bytes of the events handed over
	// and not yet consumed: the caller's queue is bounded in events, and
	// records may be up to 64 KiB each. The caller then reports every
	// event it takes off the queue (Client.Consumed), or delivery stops.
	QueueBytes int64
}

// SessionReport describes one connection: when it opened and closed, the
// cursor it asked for, the newest time_us it delivered, how many events it
// delivered and how many frames it dropped, and why it ended. A dropped
// frame is never handed over.
type SessionReport struct {
	Host                    string
	Connected, Disconnected time.Time
	StartCursor, EndTimeUS  int64
	Delivered, Dropped      int
	Reason                  string
}

// Client keeps a subscription to a Jetstream server alive: it reconnects
// with backoff, fails over between URLs, and resumes from the caller's
// committed position.
type Client struct {
	cfg    Config
	dec    *Decoder
	logger *slog.Logger
	m      *Metrics
	dialer *websocket.Dialer
	drops  *dropLogger

	// sleep waits between dials; tests replace it so they run instantly.
	sleep func(context.Context, time.Duration) error
	// jitter returns [0, 1) for the backoff.
	jitter func() float64

	// sessionID numbers sessions; every event carries its session's id.
	sessionID atomic.Uint64
	// queued holds the bytes of the events handed over and not yet
	// consumed, up to Config.QueueBytes; nil without a bound.
	queued *semaphore.Weighted
	// restart asks the running session to end so the next one resumes
	// from the caller's (reset) position.
	restart chan struct{}

	// delivered is the newest position this process handed to the caller
	// (see resumeFrom).
	mu        sync.Mutex
	delivered Position
	// gen counts Restarts; a session records what it hands over only
	// while the generation it started in is current.
	gen uint64
	// lastSpan is the stream time between the oldest and the newest event
	// the last session delivered; only Run's goroutine uses it.
	lastSpan time.Duration
	// numberingLost is a host and sequence number a session found that
	// host no longer numbers as it did (errNumberingChanged): resumed
	// from, that sequence is sent by time instead. Only Run's goroutine
	// uses it.
	numberingLost Position
}

// resumeFrom picks where a (re)connect to host starts, and how far to
// rewind it. The committed position is what survives a crash, and what a
// first connect or a new host uses: rewound by Config.Rewind, or, when
// another host stamped it, by hostChangeRewind.
//
// Within one process the events handed over are committed by the caller
// unless it dies, so a reconnect to the same host starts from the newest
// of them instead. Its rewind is a trade. Across DIDs Jetstream need not
// send events in time_us order, so an event stamped a little before the
// newest one handed over may not have been sent yet: the rewind must
// cover that. But a connection that drops before it gets past its own
// replay makes no progress at all, so the rewind must stay shorter than
// what a session carries. It is the full Rewind, but at most half the
// stream time the last session delivered (and at least 1 ms, as the
// operations of a commit share its time_us): a long session that drops
// replays the full window, and a connection that drops every few hundred
// frames still nets half of each session.
func (c *Client) resumeFrom(host string, committed Position) (Position, time.Duration) {
	c.mu.Lock()
	last := c.delivered
	c.mu.Unlock()
	if last.Host == host && last.TimeUS > 0 {
		return last, min(c.cfg.Rewind, max(c.lastSpan/2, time.Millisecond))
	}
	if committed.Host != "" && committed.Host != host {
		return committed, c.hostChangeRewind()
	}
	return committed, c.cfg.Rewind
}

// hostChangeRewind is the rewind of a position another host stamped.
// Each host stamps time_us with its own clock, and the decoder takes
// frames up to its clock skew allowance ahead of ours, so a fast host's
// position can be that far ahead of the same events on its successor:
// rewound only Config.Rewind, a failover skipped the difference for good.
// Replaying the allowance costs a few minutes of stream, which the
// idempotent writes absorb.
func (c *Client) hostChangeRewind() time.Duration {
	return max(c.cfg.Rewind, c.dec.clockSkew())
}

// handedOver records ev as delivered. The newest time_us handed over is
// kept: a session's replay hands over older events again, and must not
// move the position back.
// gen is the generation of the session that delivered ev: an older one
// was running when Restart forgot the position, and its events (already on
// their way) would write the old position back.
func (c *Client) handedOver(ev *Event, gen uint64) {
	c.mu.Lock()
	if gen != c.gen {
		c.mu.Unlock()
		return
	}
	if ev.Host != c.delivered.Host || ev.TimeUS >= c.delivered.TimeUS {
		c.delivered = Position{TimeUS: ev.TimeUS, Seq: ev.Seq, Host: ev.Host}
	}
	c.mu.Unlock()
}

// generation returns the current Restart generation.
func (c *Client) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// Restart ends the current session; the client reconnects at once from
// resume()'s position. It returns the id the next session's events will
// carry: the caller drops events of older sessions still queued.
func (c *Client) Restart() uint64 {
	// The caller's position moved (a reset): forget what was handed over,
	// and what the running session still hands over.
	// The next id is read with the generation moved, under c.mu: a
	// session reads the generation (under c.mu) before it dials, and
	// takes its id after, so a session that dialed for the new generation
	// takes an id at or above next and its events are kept. Read after
	// the unlock, next could land one past such a session, whose events
	// (from the new position, and handed over as delivered) the caller
	// then dropped: a review found the window, too narrow to force in a
	// test.
	c.mu.Lock()
	c.delivered = Position{}
	c.gen++
	next := c.sessionID.Load() + 1
	c.mu.Unlock()
	select {
	case c.restart <- struct{}{}:
	default:
	}
	return next
}

// NewClient returns a Client; call Run to start it. logger may be nil and
// m may be nil (no metrics).
func NewClient(cfg Config, dec *Decoder, logger *slog.Logger, m *Metrics) *Client {
	if cfg.Rewind <= 0 {
		cfg.Rewind = DefaultRewind
	}
	if cfg.MaxFrameBytes <= 0 {
		cfg.MaxFrameBytes = defaultMaxFrameBytes
	}
	// Past the bound, the reads' limits (MaxFrameBytes+1) would overflow.
	cfg.MaxFrameBytes = min(cfg.MaxFrameBytes, MaxMaxFrameBytes)
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = defaultReadTimeout
	}
	if cfg.StallTimeout == 0 {
		cfg.StallTimeout = defaultStallTimeout
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = defaultMinBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = defaultMaxBackoff
	}
	cfg.MaxBackoff = max(cfg.MaxBackoff, cfg.MinBackoff)

	var dialer websocket.Dialer
	if cfg.Dialer != nil {
		dialer = *cfg.Dialer
	} else {
		dialer = *websocket.DefaultDialer
		dialer.HandshakeTimeout = handshakeTimeout
	}
	dialer.EnableCompression = cfg.Compression

	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "jetstream")
	var queued *semaphore.Weighted
	if cfg.QueueBytes > 0 {
		queued = semaphore.NewWeighted(cfg.QueueBytes)
	}
	return &Client{
		queued:  queued,
		cfg:     cfg,
		dec:     dec,
		logger:  logger,
		m:       m,
		dialer:  &dialer,
		drops:   newDropLogger(logger, dropLogInterval, time.Now),
		sleep:   sleepCtx,
		jitter:  rand.Float64,
		restart: make(chan struct{}, 1),
	}
}

// eventOverhead approximates what an event costs beyond its record.
const eventOverhead = 512

// queuedSize is what ev counts against Config.QueueBytes: never more than
// the bound, so one event always fits.
func (c *Client) queuedSize(ev *Event) int64 {
	n := int64(eventOverhead)
	if ev.Commit != nil {
		n += int64(len(ev.Commit.Record))
	}
	return min(n, c.cfg.QueueBytes)
}

// Consumed tells the client that the caller took ev off its queue, when
// Config.QueueBytes bounds it.
func (c *Client) Consumed(ev *Event) {
	if c.queued != nil {
		c.queued.Release(c.queuedSize(ev))
	}
}

// Run connects and delivers decoded events on out until ctx ends, then
// returns nil; it returns an error only for an unusable configuration.
// Upstream failures are logged and retried forever.
//
// resume is called before every dial and must return the last position
// the caller has committed durably, so that nothing after it is lost
// however the connection ends. out is the backpressure: Run blocks on it
// (until ctx ends) rather than buffering; a session that has made progress
// waits on it for at most Config.StallTimeout, then closes its connection
// and waits without one (waitForRoom). Run does not close out. Run a Client
// once at a time.
func (c *Client) Run(ctx context.Context, resume func() Position, out chan<- Event) error {
	if len(c.cfg.URLs) == 0 {
		return errors.New("jetstream config: no urls")
	}
	for _, u := range c.cfg.URLs {
		if _, err := parseHost(u); err != nil {
			return fmt.Errorf("jetstream config: %w", err)
		}
	}

	// stalled counts the sessions in a row on this host that delivered
	// nothing new.
	host, attempt, stalled := 0, 0, 0
	for first := true; ; first = false {
		if ctx.Err() != nil {
			return nil
		}
		if !first {
			c.m.reconnect()
		}
		url := c.cfg.URLs[host]
		// Read before the resume position: a Restart in between then
		// makes the session's events the old generation's.
		gen := c.generation()
		pos, rewind := c.resumeFrom(url, resume())
		res, err := c.session(ctx, url, pos, rewind, gen, out)
		if res.delivered > 0 {
			// A session that delivered nothing (a refused or dropped
			// dial) says nothing about what the connection carries.
			c.lastSpan = time.Duration(res.maxUS-res.minUS) * time.Microsecond
		}
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errRestart) || c.generation() != gen {
			// A Restart that came as the session ended for another reason
			// (its signal taken by the session's watcher after the read
			// loop last looked) is answered here too, not after a backoff;
			// a signal still pending is this one, spent.
			select {
			case <-c.restart:
			default:
			}
			c.logger.Info("reconnecting from a reset cursor", "host", url)
			continue
		}
		if errors.Is(err, errNumberingChanged) {
			// Not the host's fault either, and the cure is known: redial
			// at once, by time, from the same position.
			c.m.numberingChanged()
			c.logger.Warn("jetstream host numbers its events differently now (a new instance?); resuming by time", "host", url,
				"seq", pos.Seq, "time_us", pos.TimeUS)
			continue
		}
		if errors.Is(err, errSteppedAway) {
			// Not the host's fault, and no backoff: redial as soon as the
			// caller has room, from the newest event handed over.
			c.m.steppedAway()
			attempt, stalled = 0, 0
			c.logger.Debug("stepped away while the queue was full", "host", url, "delivered", res.delivered)
			if !c.waitForRoom(ctx, &res.pending, gen, out) && ctx.Err() != nil {
				return nil
			}
			continue
		}
		switch {
		case errors.Is(err, errIdle):
			// The host went silent: another may still carry the stream.
			c.m.idleTimeout()
			host, attempt, stalled = (host+1)%len(c.cfg.URLs), 0, 0
		case res.progressed:
			// The host works: stay on it (a sequence cursor is only good
			// there) and start the backoff over.
			attempt, stalled = 0, 0
		case res.delivered == 0:
			host, stalled = (host+1)%len(c.cfg.URLs), 0
		default:
			// Only replays: the host answers but fails before anything
			// new. Give it a few tries, a sequence cursor being exact
			// there, then treat it as a failed host.
			if stalled++; stalled >= maxStalledSessions {
				host, stalled = (host+1)%len(c.cfg.URLs), 0
			}
		}
		wait := backoffDelay(attempt, c.cfg.MinBackoff, c.cfg.MaxBackoff, c.jitter)
		attempt++
		c.logSessionEnd(url, res.delivered, wait, err)
		if !c.backOff(ctx, wait) {
			return nil
		}
	}
}

// backOff sleeps out a reconnect's wait. A Restart cuts it short: the
// reset position is dialed at once, and its signal is spent here rather
// than closing the next session as soon as it connects. It reports false
// when ctx ended.
func (c *Client) backOff(ctx context.Context, wait time.Duration) bool {
	sleepCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	slept := make(chan error, 1)
	go func() { slept <- c.sleep(sleepCtx, wait) }()
	select {
	case err := <-slept:
		return err == nil
	case <-c.restart:
		cancel()
		<-slept
		c.logger.Info("reconnecting from a reset cursor at once")
		return ctx.Err() == nil
	}
}

func (c *Client) logSessionEnd(url string, delivered int, wait time.Duration, err error) {
	attrs := []any{"host", url, "delivered", delivered, "retry_in", wait}
	var refused *refusedError
	if errors.As(err, &refused) {
		attrs = append(attrs, "status", refused.Status, "body", refused.Body)
		c.logger.Warn("jetstream refused the subscription", attrs...)
		return
	}
	c.logger.Warn("jetstream session ended", append(attrs, "err", err)...)
}
