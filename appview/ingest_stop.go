package appview

import (
	"time"

	"github.com/atfeeds/appview/feeds"
)

// stopAfterProgress is what a backlog's part, started at started, asks
// before each change whether to stop for an urgent writer
// (feeds.OpenBatch.AddUntil): when wanted says one waits, and only once
// the part has applied minPartSize changes or run urgentPartTime, the
// smallest part and the part time of an urgent window. Without that
// minimum, urgent writes that came back to back (registrations in a loop)
// stopped every part at its second change: a 3,000-event backlog took
// 368–896 commits against 30. With it a catch-up under such a stream
// commits at least a smallest part's worth each time, and the writer that
// comes at a part's start waits at most that long for the stop.
func (in *ingester) stopAfterProgress(wanted func() bool, started time.Time) func() bool {
	applied := 0
	return func() bool {
		applied++ // asked before change i, with i changes applied
		return wanted() && (applied >= minPartSize || in.now().Sub(started) >= urgentPartTime)
	}
}

// heldAtOrBefore says whether the batch holds a change or an account
// event at or before stream time timeUS: a cursor at timeUS would cover
// it before it is written. The batch keeps no time for its identity
// events, so any it holds count (a part applies them first, stopped or
// not; only a cut between parts leaves them, and they are rare).
func heldAtOrBefore(b *feeds.Batch, timeUS int64) bool {
	if len(b.Identities) > 0 {
		return true
	}
	for i := range b.Changes {
		if b.Changes[i].TimeUS <= timeUS {
			return true
		}
	}
	for i := range b.Accounts {
		if b.Accounts[i].TimeUS <= timeUS {
			return true
		}
	}
	return false
}
