package backfill

import (
	"context"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/feeds"
)

// A complete viewer's read is served at once; its last-read time, which
// only decides when an idle viewer is retired (ViewerTTL), is written
// afterwards, many to a transaction, by writeTouches. Written in the
// request, as RegisterViewer did, every viewer's first read after a
// restart, and every viewer's read once an hour, waited for the writer:
// behind a live ingest batch a page took up to 100 ms instead of a few,
// and behind a catch-up batch seconds (docs/benchmarks.md, fifteenth
// round).

// touchQueueSize bounds the last-read writes waiting for the writer; past
// it a read writes its own, as before.
const touchQueueSize = 4096

// touchBatch bounds the last-read writes of one transaction.
const touchBatch = 1000

// touchStopWait bounds how long a stopping service spends on the writes
// still queued (a write already waiting for another process's lock may
// take its busy timeout). One lost costs nothing but a write at the
// viewer's next read.
const touchStopWait = 2 * time.Second

// touchLater queues the write of a complete viewer's last read, stored
// at lastRead, and reports whether it did. It does not when the write
// must land before the read is answered: the viewer is within an hour of
// being retired (a retirement before the write would empty the feed this
// read was told is complete), or the queue is full.
func (s *Service) touchLater(viewer syntax.DID, feed string, lastRead, now time.Time) bool {
	if ttl := s.cfg.ViewerTTL; ttl > 0 && now.Sub(lastRead) >= ttl-feeds.LastReadResolution {
		return false
	}
	select {
	case s.touches <- feeds.ViewerTouch{Viewer: viewer, Feed: feed, At: now}:
		return true
	default:
		s.metrics.lastReads("queue_full", 1)
		return false
	}
}

// writeTouches writes the queued last reads until ctx ends, then what is
// still queued. The writes outlive ctx by touchStopWait at most: each is
// of a read already served.
func (s *Service) writeTouches(ctx context.Context) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(touchStopWait)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-wctx.Done(): // returned
		}
	})
	defer stop()
	for {
		select {
		case <-ctx.Done():
			for s.writeTouchBatch(wctx, nil) {
			}
			return
		case t := <-s.touches:
			s.writeTouchBatch(wctx, &t)
		}
	}
}

// writeTouchBatch writes first (when set) and whatever else is queued, up
// to touchBatch, in one transaction, and reports whether it wrote any.
// While it waits for the writer, more reads queue theirs for the next.
func (s *Service) writeTouchBatch(ctx context.Context, first *feeds.ViewerTouch) bool {
	batch := make([]feeds.ViewerTouch, 0, min(touchBatch, len(s.touches)+1))
	if first != nil {
		batch = append(batch, *first)
	}
fill:
	for len(batch) < touchBatch {
		select {
		case t := <-s.touches:
			batch = append(batch, t)
		default:
			break fill
		}
	}
	if len(batch) == 0 {
		return false
	}
	if err := s.store.TouchViewers(ctx, batch); err != nil {
		// The viewers keep their older last reads: the next read after
		// an hour writes again, or a retirement comes earlier than due.
		s.log.Warn("write viewers' last reads", "viewers", len(batch), "err", err)
		s.metrics.lastReads("failed", len(batch))
		return ctx.Err() == nil
	}
	s.metrics.lastReads("written", len(batch))
	return true
}
