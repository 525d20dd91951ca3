package feeds

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// The WAL is folded back into the database file by a goroutine of its own,
// on its own connection, instead of by the commit that crosses SQLite's
// autocheckpoint threshold. A checkpoint copies every page the WAL holds
// and syncs the file: about a tenth of the writer's time in the full-size
// ingest benchmark, paid inside ApplyBatch while the second core idled. A
// PASSIVE checkpoint never waits for readers or the writer and never makes
// them wait, so moving it aside costs the writer nothing.

// checkpointWALBytes is the WAL size at which the checkpointer copies it
// back: large enough that a feed page rewritten by several batches in a
// row is copied once, small enough to bound the file.
const checkpointWALBytes = 32 << 20

// checkpointPoll is how often the checkpointer looks at the WAL's size.
const checkpointPoll = 200 * time.Millisecond

type checkpointer struct {
	db       *sql.DB
	walPath  string
	minBytes int64
	log      *slog.Logger
	done     atomic.Int64 // checkpoints run, for tests
	stop     context.CancelFunc
	wg       sync.WaitGroup
}

func startCheckpointer(path string, minBytes int64, log *slog.Logger) (*checkpointer, error) {
	db, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		return nil, fmt.Errorf("open checkpoint connection: %w", err)
	}
	db.SetMaxOpenConns(1)
	ctx, cancel := context.WithCancel(context.Background())
	c := &checkpointer{db: db, walPath: path + "-wal", minBytes: minBytes, log: log, stop: cancel}
	c.wg.Go(func() { c.run(ctx) })
	return c, nil
}

func (c *checkpointer) run(ctx context.Context) {
	t := time.NewTicker(checkpointPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fi, err := os.Stat(c.walPath)
		if err != nil || fi.Size() < c.minBytes {
			continue
		}
		if _, err := c.db.ExecContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`); err != nil {
			if ctx.Err() == nil {
				c.log.Warn("background checkpoint", "err", err)
			}
			continue
		}
		c.done.Add(1)
	}
}

// close stops the goroutine and closes its connection.
func (c *checkpointer) close() error {
	c.stop()
	c.wg.Wait()
	return c.db.Close()
}
