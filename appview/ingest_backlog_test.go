package appview

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/jetstream"
)

// A catch-up's batches, taken from a queue holding a batch_size or more,
// are committed as a backlog's (feeds.Batch.Backlog), the one cut where
// the queue runs dry too: their commits leave the WAL unchecked past the
// live threshold. The first live batch after them checkpoints.
func TestACatchUpsBatchesAreCommittedAsABacklogs(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	store := openIndexAllStoreWith(t, path, func(o *feeds.Options) { o.WALPages = 64 })
	dbSize := func() int64 {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	// Posts of about a page each: a batch of 80 writes more pages than
	// the live threshold (64), fewer than the backlog's (256).
	// Two batches of 80 queued, the second cut where the queue runs dry;
	// then one event more, once they are committed.
	const backlog = 161
	source := queuedPosts(backlog, largePost)
	events := make(chan jetstream.Event, backlog)
	for range backlog - 1 {
		events <- <-source
	}
	before := dbSize()
	var sizes []int64
	applied := 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in := &ingester{
		store: store, batchSize: 10, catchupSize: 80, batchInterval: 200 * time.Millisecond,
		log: slog.New(slog.DiscardHandler), sweepIdle: time.Hour, now: time.Now,
		afterCommit: func(res feeds.BatchResult) {
			sizes = append(sizes, dbSize())
			if applied += res.Applied; applied == backlog-1 {
				events <- <-source
			}
			if applied == backlog {
				cancel()
			}
		},
	}
	if err := in.Run(ctx, events); err != nil {
		t.Fatal(err)
	}
	if len(sizes) != 3 {
		t.Fatalf("%d batches, want two of 80 and one of 1", len(sizes))
	}
	for i, size := range sizes[:2] {
		if size != before {
			t.Errorf("catch-up batch %d was checkpointed: the database file went from %d to %d bytes", i+1, before, size)
		}
	}
	if sizes[2] <= before {
		t.Errorf("the live batch after the catch-up did not checkpoint: the database file stayed at %d bytes", sizes[2])
	}
}
