package appview

import (
	"time"

	"github.com/atfeeds/appview/feeds"
)

// minStopTime is how long a backlog's part runs before it may stop for an
// urgent writer, once freeStops stops came within a second
// (stopAfterProgress).
const minStopTime = 10 * time.Millisecond

// freeStops is how many stops within a second a part may make at once,
// at the change in hand, before stops need minStopTime of applying.
const freeStops = 5

// stopAfterProgress is what a backlog's part, started at started, asks
// before each change whether to stop for an urgent writer
// (feeds.OpenBatch.AddUntil): when wanted says one waits, at once if
// fewer than freeStops stops came in the last second, else once the part
// has run minStopTime.
//
// Stopping at once every time, urgent writes that came back to back
// (registrations in a loop) stopped every part at its second change: a
// 3,000-event backlog took 368–896 commits against 30 in a test, and a
// catch-up beside a registration every millisecond ran at 2,501 events/s
// in batches of 19 events, each paying its own fan-out statements, commit
// and sweep tick. With minStopTime it ran at 4,014 in batches of 250. But
// a stop that always waits minStopTime made a first read's writes wait
// 80–86 ms on average during a catch-up, against 53–62 stopping at once
// (a first read's writes come in bursts, each burst at the start of the
// part after the cut the last one made; the part's applying and the
// fan-out of what it applied both grow with the minimum). A first read
// cuts a few batches, not a few a second, so the stops it needs come
// free: with a new viewer every 2 s, 143 stops came at once and none
// after the minimum (appview_ingest_part_stops_total; docs/benchmarks.md,
// thirtieth and thirty-first rounds).
func (in *ingester) stopAfterProgress(wanted func() bool, started time.Time) func() bool {
	return func() bool {
		if !wanted() {
			return false
		}
		now := in.now()
		oldest := in.stops[in.nextStop] // the freeStops-th stop back
		free := oldest.IsZero() || now.Sub(oldest) >= time.Second
		if !free && now.Sub(started) < minStopTime {
			return false
		}
		in.stops[in.nextStop] = now
		in.nextStop = (in.nextStop + 1) % freeStops
		in.countStop(free)
		return true
	}
}

// countStop counts a part's stop for an urgent writer: free (at the
// change in hand) or after minStopTime.
func (in *ingester) countStop(free bool) {
	c := in.stopsAfterMinimum
	if free {
		c = in.stopsAtOnce
	}
	if c != nil {
		c.Inc()
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
