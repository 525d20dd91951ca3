package appview

import (
	"context"
	"errors"
	"log/slog"

	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/jetstream"
)

// sessionLog keeps every Jetstream connection as a sync run (host, connect
// and disconnect time, start cursor and newest time_us delivered, events
// delivered and dropped, why it ended), written on a goroutine of its own.
// The consumer hands a report over and redials at once: the database's
// writer may be busy with a catch-up batch for many seconds, or its lock
// held by another process up to the busy timeout, and a redial that waited
// for the record would leave the stream idle meanwhile.
type sessionLog struct {
	store   *feeds.Store
	log     *slog.Logger
	reports chan jetstream.SessionReport
}

// sessionLogBacklog bounds the reports waiting to be written: a session
// ends every few seconds at most, even stepping away during a catch-up.
const sessionLogBacklog = 64

func newSessionLog(store *feeds.Store, log *slog.Logger) *sessionLog {
	return &sessionLog{store: store, log: log, reports: make(chan jetstream.SessionReport, sessionLogBacklog)}
}

// add queues r; a report that finds the backlog full is dropped (operator
// history only) and said so.
func (l *sessionLog) add(r jetstream.SessionReport) {
	select {
	case l.reports <- r:
	default:
		l.log.Warn("jetstream session not recorded: too many waiting to be written", "host", r.Host)
	}
}

// close ends Run once the reports queued are written; call it after the
// consumer's Run has returned, so its last session is kept too.
func (l *sessionLog) close() { close(l.reports) }

// Run writes the reports until close. A write that finds the write lock
// held by another process past the busy timeout drops, with it, every
// report queued by then: each would wait the busy timeout in turn, and a
// stop drains the backlog (64 reports, over five minutes) before the
// store closes.
func (l *sessionLog) Run() {
	for r := range l.reports {
		if err := l.write(r); errors.Is(err, feeds.ErrWriteBusy) {
			l.dropQueued()
		}
	}
}

// dropQueued drops the reports waiting, and says how many.
func (l *sessionLog) dropQueued() {
	n := 0
	for {
		select {
		case _, ok := <-l.reports:
			if ok {
				n++
				continue
			}
		default:
		}
		break
	}
	if n > 0 {
		l.log.Warn("jetstream sessions not recorded: another process holds the database's write lock", "dropped", n)
	}
}

// write records r. It sets no deadline: one would count the wait for the
// store's writer, which behind a catch-up batch lasts as long as the batch
// (tens of seconds at 100,000 viewers: docs/benchmarks.md, fourteenth
// round), and the report of a session that stepped
// away during it would be dropped; waiting here holds up no redial. A
// write lock another process holds still fails it after the busy timeout.
func (l *sessionLog) write(r jetstream.SessionReport) error {
	err := l.store.RecordSyncRun(context.Background(), feeds.SyncRun{
		Kind: "jetstream", Subject: r.Host, Outcome: "disconnected", Error: r.Reason,
		Written: r.Delivered, Skipped: r.Dropped,
		Started: r.Connected, Duration: r.Disconnected.Sub(r.Connected),
		StartCursor: r.StartCursor, EndCursor: r.EndTimeUS,
	})
	if err != nil {
		l.log.Warn("record jetstream session", "err", err)
	}
	return err
}
