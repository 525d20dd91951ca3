package jetstream

import (
	"bytes"
	"compress/flate"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"time"

	"github.com/gorilla/websocket"
)

const (
	// maxRefusalBody bounds how much of a refused handshake's body we
	// read: enough for the reason a server gives, not a page of HTML.
	maxRefusalBody = 512
	pongWriteWait  = 5 * time.Second
)

// refusedError is a dial the server answered with an HTTP status instead
// of a websocket upgrade (a 503 while a v2 server starts, a 400 with its
// reason in the body).
type refusedError struct {
	Status int
	Body   string
	Err    error
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("dial refused: status %d: %s", e.Status, e.Body)
}

func (e *refusedError) Unwrap() error { return e.Err }

// errRestart ends a session on Restart.
var errRestart = errors.New("restart requested")

// errOnlyJunk ends a session whose malformed frames, with no valid one
// between them, have run for ReadTimeout. Each frame renews the read
// deadline, so without it a host sending nothing but junk would hold the
// client forever, the position still, and never let it fail over.
var errOnlyJunk = errors.New("no valid frame within the read timeout")

// errNumberingChanged ends a session resumed by sequence number whose
// first event shows the host numbering its events differently: a number
// below the one asked for (a v2 server replays from it inclusively), or
// an event older than the position by more than any rewind. The instance
// behind the URL was replaced and counts from elsewhere: where our number
// was past its head it started at its live tip, silently skipping
// everything since the position; below, it replayed an unrelated stretch.
// The next session resumes by time (Client.numberingLost).
var errNumberingChanged = errors.New("the host's sequence numbers no longer match the position")

// errIdle ends a session that handed over no event for
// Config.IdleTimeout, though pings kept its connection alive.
var errIdle = errors.New("no event within the idle timeout")

// readState is what the read loop and the ping handler share.
type readState struct {
	// inMessage is set while a message is read: pings then renew nothing.
	inMessage bool
	// idleBy, when set, is when the session ends for want of an event
	// (Config.IdleTimeout): no read deadline reaches past it.
	idleBy time.Time
}

// readDeadline is the deadline of a wait for the next message: ReadTimeout
// from now, but no later than the idle limit. A message that has begun
// has ReadTimeout to end, idle limit or not (readFrame).
func (c *Client) readDeadline(st *readState) time.Time {
	d := time.Now().Add(c.cfg.ReadTimeout)
	if !st.idleBy.IsZero() && st.idleBy.Before(d) {
		return st.idleBy
	}
	return d
}

// idle reports whether err, from a wait for the next message, is the
// idle limit passing.
func (st *readState) idle(err error) bool {
	var ne net.Error
	return !st.idleBy.IsZero() && !time.Now().Before(st.idleBy) && errors.As(err, &ne) && ne.Timeout()
}

// awake moves the idle limit on after an event.
func (c *Client) awake(st *readState) {
	if c.cfg.IdleTimeout > 0 {
		st.idleBy = time.Now().Add(c.cfg.IdleTimeout)
	}
}

// sessionResult says what a session delivered.
type sessionResult struct {
	delivered int
	// progressed is set once an event past the session's start position
	// was delivered. A reconnect replays from before that position, so a
	// session that delivered only replays moved nothing on, and must not
	// count as a working host.
	progressed bool
	// minUS and maxUS are the oldest and newest time_us delivered.
	minUS, maxUS int64
	// pending is the event a session that stepped away (errSteppedAway)
	// read and could not hand over.
	pending Event
}

// session runs one connection to host, resuming from pos less rewind, and
// returns what it delivered on out; gen is the Restart generation pos was
// read in. It returns when the connection fails
// or ctx ends.
func (c *Client) session(ctx context.Context, host string, pos Position, rewind time.Duration, gen uint64, out chan<- Event) (sessionResult, error) {
	var res sessionResult
	if pos.Seq > 0 && c.numberingLost == (Position{Host: host, Seq: pos.Seq}) {
		// Its time_us was stamped by the old instance's clock.
		pos.Seq, rewind = 0, max(rewind, c.hostChangeRewind())
	}
	cursor := cursorFor(host, pos, rewind)
	target, err := subscribeURL(host, c.cfg.WantedCollections, cursor)
	if err != nil {
		return res, err
	}
	var header http.Header
	if c.cfg.UserAgent != "" {
		header = http.Header{"User-Agent": {c.cfg.UserAgent}}
	}
	dialer, lift := boundedDialer(c.dialer)
	conn, resp, err := dialer.DialContext(ctx, target, header)
	if err != nil {
		c.m.dialError()
		if resp != nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, maxRefusalBody))
			_ = resp.Body.Close()
			return res, &refusedError{Status: resp.StatusCode, Body: string(bytes.TrimSpace(body)), Err: err}
		}
		return res, fmt.Errorf("dial: %w", err)
	}
	lift()
	// The id first, then the generation: a Restart that came after the
	// generation this session was dialed for (its resume position read
	// with it) either returned an id above this one or finds the session
	// ended here, before it reads; so the caller never keeps an event read
	// from the old position (TestRestartDuringDialKeepsNoOldEvent).
	id := c.sessionID.Add(1)
	if c.generation() != gen {
		_ = conn.Close()
		select {
		case <-c.restart: // the signal this check already answered
		default:
		}
		return res, errRestart
	}
	c.logger.Info("connected", "host", host, "cursor", cursor)
	report := SessionReport{Host: host, Connected: time.Now(), StartCursor: cursor}
	var endErr error
	if c.cfg.OnSessionEnd != nil {
		defer func() {
			report.Disconnected = time.Now()
			report.Reason = "context ended"
			if endErr != nil {
				report.Reason = endErr.Error()
			}
			c.cfg.OnSessionEnd(report)
		}()
	}
	c.m.setConnected(true)
	defer c.m.setConnected(false)

	// Closing the conn is the only way to interrupt a blocked read.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	restarted := make(chan struct{})
	sessionDone := make(chan struct{})
	defer close(sessionDone)
	go func() {
		select {
		case <-c.restart:
			close(restarted)
			_ = conn.Close()
		case <-sessionDone:
		}
	}()
	defer conn.Close()
	var st readState
	c.awake(&st)
	c.keepalive(conn, &st)

	var buf bytes.Buffer
	// A sequence cursor resumes on its own numbering; otherwise time_us
	// tells a new event from a replay.
	bySeq := pos.Seq > 0 && pos.Host == host
	// junkSince is when the current run of malformed frames began; zero
	// after a valid frame. Measured from the last valid frame instead, a
	// healthy session ended on one malformed frame after a quiet spell
	// kept by pings, or after a long wait for room in out
	// (TestOneMalformedFrameAfterAQuietSpellKeepsTheSession).
	var junkSince time.Time
	dropped := func(ev *Event, derr *DropError) error {
		report.Dropped++
		c.m.frameDropped(derr.Reason)
		c.drops.log(host, ev, derr)
		if junkSince.IsZero() {
			junkSince = time.Now()
		} else if time.Since(junkSince) > c.cfg.ReadTimeout {
			endErr = errOnlyJunk
			return endErr
		}
		return nil
	}
	for {
		typ, truncated, err := c.readFrame(conn, &buf, &st)
		if errors.Is(err, errCorruptMessage) {
			// The message's own fault: the connection's framing is
			// intact, and the next message is decompressed on its own.
			// Reconnecting instead would replay it forever.
			if err := dropped(&Event{}, drop(ReasonBadCompression, err)); err != nil {
				return res, err
			}
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return res, nil
			}
			select {
			case <-restarted:
				endErr = errRestart
				return res, errRestart
			default:
			}
			if errors.Is(err, errIdle) {
				endErr = err
				return res, err
			}
			endErr = fmt.Errorf("read frame: %w", err)
			return res, endErr
		}

		var ev Event
		var derr *DropError
		switch {
		case typ != websocket.TextMessage:
			derr = dropf(ReasonBinaryFrame, "unexpected binary frame")
		case truncated:
			// Drop it and read on: reconnecting instead would replay the
			// same frame forever.
			ev, derr = c.dec.salvage(buf.Bytes(), dropf(ReasonFrameTooLarge, "frame over %d bytes", c.cfg.MaxFrameBytes))
		default:
			var err error
			ev, err = c.dec.Decode(buf.Bytes())
			if err != nil && !errors.As(err, &derr) {
				derr = drop(ReasonBadJSON, err)
			}
		}
		if derr != nil {
			// A frame judged bad does not move the position, by its time
			// or its sequence: either could be anything. Handed over
			// (it used to be, so the cursor moved past junk), one stamped
			// ahead of the frames after it became the cursor, and a
			// reconnect skipped them (TestAMalformedFrameStampedAheadIsNotThePosition,
			// TestAMalformedFrameDoesNotSetTheResumeSequence). The good
			// frames around it move the cursor; a reconnect that replays
			// it drops it again.
			if err := dropped(&ev, derr); err != nil {
				return res, err
			}
			continue
		}
		junkSince = time.Time{}
		if bySeq && res.delivered == 0 && ev.Seq > 0 &&
			(ev.Seq < pos.Seq || ev.TimeUS < pos.TimeUS-c.hostChangeRewind().Microseconds()) {
			c.numberingLost = Position{Host: host, Seq: pos.Seq}
			endErr = errNumberingChanged
			return res, endErr
		}
		c.m.eventReceived(&ev)

		ev.Host = host
		ev.Session = id
		// Only a session that has made progress steps away: one still in
		// its replay keeps waiting, so every session moves the stream on.
		stall := time.Duration(0)
		if res.progressed {
			stall = c.cfg.StallTimeout
		}
		ok, err := c.handOver(ctx, &ev, out, restarted, stall)
		switch {
		case errors.Is(err, errSteppedAway):
			stepAway(conn)
			res.pending = ev
			endErr = err
			return res, err
		case err != nil:
			endErr = err
			return res, err
		case !ok:
			return res, nil
		}
		res.delivered++
		c.awake(&st)
		if ev.TimeUS > pos.TimeUS || (bySeq && ev.Seq > pos.Seq) {
			res.progressed = true
		}
		if res.delivered == 1 || ev.TimeUS < res.minUS {
			res.minUS = ev.TimeUS
		}
		res.maxUS = max(res.maxUS, ev.TimeUS)
		report.Delivered++
		report.EndTimeUS = max(report.EndTimeUS, ev.TimeUS)
		c.handedOver(&ev, gen)
	}
}

// unqueue gives back the bytes of an event that was not handed over.
func (c *Client) unqueue(size int64) {
	if c.queued != nil {
		c.queued.Release(size)
	}
}

// maxDiscardFrames bounds how much of an oversized message readFrame
// reads to discard it, in frame caps (MaxFrameBytes). Past it the message
// is abandoned: the next NextReader skips its rest.
const maxDiscardFrames = 16

// readFrame reads the next message into buf, keeping at most MaxFrameBytes
// of it. The rest of an oversized message is discarded so the connection
// survives (read, up to maxDiscardFrames caps, then skipped unread);
// memory stays bounded either way. gorilla's own read
// limit is not used: it kills the connection, and with compression it
// counts compressed bytes. A message must end within ReadTimeout of its
// start: st.inMessage keeps the pings read between its frames from
// renewing the deadline, so a server sending one endless message cannot
// hold the session (keepalive).
func (c *Client) readFrame(conn *websocket.Conn, buf *bytes.Buffer, st *readState) (typ int, truncated bool, err error) {
	// A message left unread (abandoned below: too long, or corrupt) is
	// still in progress: the NextReader below skips its rest under its
	// own deadline, and the pings read meanwhile renew nothing (inMessage
	// stayed set), so an endless one still ends the session. The wait
	// for the next message after it falls under that deadline too: a
	// quiet stream then redials, a cost only such a message brings.
	skipping := st.inMessage
	if !skipping {
		if err := conn.SetReadDeadline(c.readDeadline(st)); err != nil {
			return 0, false, err
		}
	}
	typ, r, err := conn.NextReader()
	if err != nil {
		if !skipping && st.idle(err) {
			return 0, false, errIdle
		}
		return 0, false, err
	}
	// The message has begun: it has ReadTimeout to end. The wait for it
	// may have been cut to the idle limit, which must not end a message
	// arriving (TestAMessageArrivingAtTheIdleLimitIsRead).
	if skipping || !st.idleBy.IsZero() {
		if err := conn.SetReadDeadline(time.Now().Add(c.cfg.ReadTimeout)); err != nil {
			return 0, false, err
		}
	}
	st.inMessage = true
	abandoned := false
	defer func() { st.inMessage = abandoned }()
	buf.Reset()
	n, err := buf.ReadFrom(io.LimitReader(r, c.cfg.MaxFrameBytes+1))
	if err != nil {
		c.m.bytesReceived(int(n))
		err = c.corrupt(err)
		abandoned = errors.Is(err, errCorruptMessage)
		return 0, false, err
	}
	if n > c.cfg.MaxFrameBytes {
		truncated = true
		buf.Truncate(int(c.cfg.MaxFrameBytes))
		// The rest is read to count it, up to a bound: past it, the next
		// NextReader skips what is left as it came, without inflating
		// it. A compressed message inflated to its end could cost
		// gigabytes of work for a few megabytes sent, past ReadTimeout,
		// and every reconnect would replay it.
		limit := maxDiscardFrames * min(c.cfg.MaxFrameBytes, math.MaxInt64/maxDiscardFrames)
		rest, err := io.Copy(io.Discard, io.LimitReader(r, limit))
		n += rest
		if err != nil {
			c.m.bytesReceived(int(n))
			err = c.corrupt(err)
			abandoned = errors.Is(err, errCorruptMessage)
			return 0, false, err
		}
		abandoned = rest == limit
	}
	c.m.bytesReceived(int(n))
	return typ, truncated, nil
}

// errCorruptMessage is a compressed message whose deflate data is
// corrupt (readFrame).
var errCorruptMessage = errors.New("corrupt compressed message")

// corrupt marks err, from reading a message, as errCorruptMessage when it
// is the decompressor's complaint about the message's data rather than a
// failed connection. gorilla negotiates no context takeover, so each
// message is decompressed on its own and the next one can still be read.
// A connection error taken for one by mistake (a TLS record cut short is
// io.ErrUnexpectedEOF too) still ends the session: the connection keeps
// it, and the next NextReader returns it.
func (c *Client) corrupt(err error) error {
	var ce flate.CorruptInputError
	if errors.As(err, &ce) || (c.cfg.Compression && err == io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %v", errCorruptMessage, err)
	}
	return err
}

// keepalive renews the read deadline on pings and pongs as well as frames,
// so a quiet but healthy stream (a narrow wantedCollections filter) is not
// mistaken for a dead one, up to Config.IdleTimeout. Pings are answered
// here, inside the read loop, which is why that loop must never wait on
// anything slower than out. Between the frames of a message (st.inMessage,
// set by readFrame) they renew nothing: the message's own deadline stands.
func (c *Client) keepalive(conn *websocket.Conn, st *readState) {
	renew := func() error {
		if st.inMessage {
			return nil
		}
		return conn.SetReadDeadline(c.readDeadline(st))
	}
	conn.SetPingHandler(func(data string) error {
		_ = renew()
		err := conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(pongWriteWait))
		if err == nil || errors.Is(err, websocket.ErrCloseSent) {
			return nil
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil
		}
		return err
	})
	conn.SetPongHandler(func(string) error { return renew() })
}
