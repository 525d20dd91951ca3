package appview

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/jetstream"
)

// ingester turns the consumer's events into batches: it flushes at
// batchSize events or batchInterval after the first event of a batch,
// whichever comes first, and each flush is one transaction carrying the
// cursor of everything it consumed, dropped frames included, so junk never
// stalls the cursor.
type ingester struct {
	store         *feeds.Store
	batchSize     int
	batchInterval time.Duration
	log           *slog.Logger
	// afterCommit, when set, is told about every committed batch (the
	// prune sweep ticks on it).
	afterCommit func(feeds.BatchResult)
}

// Run consumes events until ctx ends, then commits what it holds and
// returns nil. A failed commit is our own state broken: it is returned and
// stops the daemon.
func (in *ingester) Run(ctx context.Context, events <-chan jetstream.Event) error {
	batch := &feeds.Batch{Changes: make([]feeds.Change, 0, in.batchSize)}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	pending := false // the batch holds something, if only a cursor move
	flush := func(ctx context.Context) error {
		timer.Stop()
		if !pending {
			return nil
		}
		res, err := in.store.ApplyBatch(ctx, batch)
		if err != nil {
			return fmt.Errorf("ingest batch: %w", err)
		}
		if in.afterCommit != nil {
			in.afterCommit(res)
		}
		batch.Changes = batch.Changes[:0]
		batch.Cursor = feeds.StreamCursor{}
		pending = false
		return nil
	}
	add := func(ev *jetstream.Event) {
		if !pending {
			timer.Reset(in.batchInterval)
			pending = true
		}
		addEvent(batch, ev)
	}
	for {
		select {
		case <-ctx.Done():
			// Take what the read loop already queued, then commit it with
			// a context that survives the shutdown.
			for drained := false; !drained; {
				select {
				case ev := <-events:
					add(&ev)
				default:
					drained = true
				}
			}
			return flush(context.WithoutCancel(ctx))
		case ev := <-events:
			add(&ev)
			if len(batch.Changes) >= in.batchSize {
				if err := flush(ctx); err != nil {
					return err
				}
			}
		case <-timer.C:
			if err := flush(ctx); err != nil {
				return err
			}
		}
	}
}

// addEvent moves the batch cursor to the event and, for a commit, adds the
// record change. Identity and account events only move the cursor for now.
func addEvent(b *feeds.Batch, ev *jetstream.Event) {
	if ev.TimeUS >= b.Cursor.TimeUS {
		b.Cursor = feeds.StreamCursor{TimeUS: ev.TimeUS, Seq: ev.Seq, Host: ev.Host}
	}
	if ev.Kind != jetstream.KindCommit || ev.Commit == nil {
		return
	}
	c := ev.Commit
	b.Changes = append(b.Changes, feeds.Change{
		DID:         ev.DID,
		Collection:  c.Collection,
		RKey:        c.RKey,
		Op:          operation(c.Operation),
		Rev:         c.Rev,
		CID:         c.CID,
		Record:      c.Record,
		Subject:     c.Subject,
		CreatedAtUS: c.CreatedAtUS,
		TimeUS:      ev.TimeUS,
	})
}

func operation(op jetstream.Operation) feeds.Operation {
	switch op {
	case jetstream.OpCreate:
		return feeds.OpCreate
	case jetstream.OpUpdate:
		return feeds.OpUpdate
	default:
		return feeds.OpDelete
	}
}
