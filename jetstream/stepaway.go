package jetstream

import (
	"context"
	"errors"
	"time"

	"github.com/gorilla/websocket"
)

// defaultStallTimeout is how long a session waits for room in the
// caller's queue before it steps away: under the 5 s in which Jetstream
// wants a ping answered.
const defaultStallTimeout = 3 * time.Second

// errSteppedAway ends a session whose caller's queue stayed full for
// Config.StallTimeout. It is not a failure: the caller is busy applying
// what it was handed.
var errSteppedAway = errors.New("stepped away while the caller's queue was full")

// handOver hands ev to the caller: it waits for room in the caller's
// queue (QueueBytes, then out), until ctx ends (nil, and false), a Restart
// closes restarted (errRestart), or, when stall is positive, until the
// wait has lasted stall (errSteppedAway). It reports whether ev was
// handed over.
//
// Gorilla answers pings only while the session reads, and the session
// does not read while it waits here. A caller applying a large catch-up
// batch would leave the server's pings unanswered, and Jetstream drops
// such a client; so a session that has made progress steps away instead:
// it closes its connection cleanly, and the client waits for room without
// one, then resumes from the newest event it handed over (Run).
func (c *Client) handOver(ctx context.Context, ev *Event, out chan<- Event, restarted <-chan struct{}, stall time.Duration) (bool, error) {
	var deadline time.Time // set on the first wait
	var size int64
	if c.queued != nil {
		// Waits while the caller's queue holds QueueBytes; like a full
		// queue, that stops reading.
		size = c.queuedSize(ev)
		if !c.queued.TryAcquire(size) {
			// A Restart ends this wait too: the semaphore only knows
			// contexts, so it cancels one.
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			go func() {
				select {
				case <-restarted:
					cancel()
				case <-rctx.Done():
				}
			}()
			actx := rctx
			if stall > 0 {
				deadline = time.Now().Add(stall)
				var cancelDeadline context.CancelFunc
				actx, cancelDeadline = context.WithDeadline(rctx, deadline)
				defer cancelDeadline()
			}
			if err := c.queued.Acquire(actx, size); err != nil {
				if ctx.Err() != nil {
					return false, nil
				}
				select {
				case <-restarted:
					return false, errRestart
				default:
				}
				return false, errSteppedAway
			}
		}
	}
	select {
	case out <- *ev:
		return true, nil
	default:
	}
	var timeout <-chan time.Time
	if stall > 0 {
		if deadline.IsZero() {
			deadline = time.Now().Add(stall)
		}
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case out <- *ev:
		return true, nil
	case <-ctx.Done():
		c.unqueue(size)
		return false, nil
	case <-restarted:
		c.unqueue(size)
		return false, errRestart
	case <-timeout:
		c.unqueue(size)
		return false, errSteppedAway
	}
}

// stepAway closes conn with a close frame saying why, so the server sees
// a client leaving rather than a dead one.
func stepAway(conn *websocket.Conn) {
	msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "consumer busy")
	_ = conn.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
}

// waitForRoom hands over the event a session stepped away with, without a
// connection open: it waits until the caller's queue has room (so the
// redial comes when the caller is ready for more), ctx ends, or a Restart
// makes the event stale. It reports whether ev was handed over.
func (c *Client) waitForRoom(ctx context.Context, ev *Event, gen uint64, out chan<- Event) bool {
	// handOver waits on a channel a Restart closes, as a session's is; a
	// signal taken here after ev was handed over is not needed: Restart
	// moved the generation before signalling, so handedOver ignores ev
	// and the next session is dialed for the new generation.
	restarted := make(chan struct{})
	done := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-c.restart:
			close(restarted)
		case <-done:
		}
	}()
	ok, err := c.handOver(ctx, ev, out, restarted, 0)
	close(done)
	<-watched
	if errors.Is(err, errRestart) {
		// The Restart's signal was taken here, not by a session: the
		// next session is dialed for the new generation anyway.
		return false
	}
	if ok {
		c.handedOver(ev, gen)
	}
	return ok
}
