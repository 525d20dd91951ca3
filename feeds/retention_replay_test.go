package feeds

import (
	"slices"
	"testing"
	"time"
)

// A live update of an old record leaves its indexed time as it was, so
// retention could retire the record (no feed held it any more) between
// the update and its replay after a reconnect; the replay found no record
// and no tombstone, stored it again and fanned it out: a duplicate
// changed the store and a follower's feed. (Found by a review.) Retention
// now keeps a record while its revision is newer than the cutoff.
//
// "three windows old" is a record indexed more than two windows before its
// edit: the first fix's bound for revisions stamped far ahead ("indexed
// more than a window before the cutoff") retired it at once, whatever its
// revision, so the replayed edit stored it again. (Found by a review: a
// random replay test with a one-hour window and edits hours later.)
func TestAReplayedUpdateDoesNotBringBackARetiredRecord(t *testing.T) {
	for _, tc := range []struct {
		name   string
		editAt int64 // hours of event time; p was indexed at 0
	}{
		{"two windows old", 2},
		{"three windows old", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openSweep(t, t.TempDir()+"/appview.db", followingPosts(1),
				SweepOptions{Retention: time.Hour, TombstoneWindow: 2 * time.Hour})
			apply(t, s, follow("v", "alice", "f", 1), post("alice", "p", 2), post("alice", "q", 3))
			tick(t, s, t0, true) // cap 1: p trimmed from v's feed
			if got := feedRKeys(t, s, "following", "v", postNSID); !slices.Equal(got, []string{"q"}) {
				t.Fatalf("feed after sweep = %v, want [q]", got)
			}
			// alice edits p (an update keeps indexed_us).
			upd := post("alice", "p", tc.editAt*hourUS)
			upd.Op, upd.CID = OpUpdate, "bafyedited"
			apply(t, s, upd)
			tick(t, s, t0.Add(time.Minute), false)
			if n := count(t, s, `SELECT count(*) FROM records WHERE rkey = 'p'`); n != 1 {
				t.Errorf("p retired a moment after its edit: %d stored", n)
			}
			before := dump(t, s)
			// The consumer reconnects and replays the last seconds: the same update.
			if res := apply(t, s, upd); res.Duplicates != 1 {
				t.Errorf("replayed update: %+v, want a duplicate", res)
			}
			if after := dump(t, s); !slices.Equal(before, after) {
				t.Errorf("replayed duplicate changed the store:\n before %v\n after  %v", before, after)
			}
			if got := feedRKeys(t, s, "following", "v", postNSID); !slices.Equal(got, []string{"q"}) {
				t.Errorf("feed after replay = %v, want [q]", got)
			}

			// Once the edit is older than the window too, retention retires p.
			apply(t, s, post("alice", "r", (tc.editAt+2)*hourUS))
			res := tick(t, s, t0.Add(2*time.Minute), false)
			if n := count(t, s, `SELECT count(*) FROM records WHERE rkey = 'p'`); n != 0 {
				t.Errorf("p still stored after its edit aged past the window (%+v)", res)
			}
		})
	}
}

// A revision stamped far ahead of the stream (a PDS clock days fast) keeps
// its record one more window at most, however far ahead it is.
func TestARevisionStampedFarAheadDoesNotKeepARecord(t *testing.T) {
	s := openSweep(t, t.TempDir()+"/appview.db", followingPosts(1),
		SweepOptions{Retention: time.Hour, TombstoneWindow: 2 * time.Hour})
	far := post("alice", "p", 2)
	far.Rev = rev(100 * hourUS) // a PDS clock 100 h fast
	apply(t, s, far)
	apply(t, s, post("bob", "now", 3*hourUS))
	tick(t, s, t0, true)
	if n := count(t, s, `SELECT count(*) FROM records WHERE rkey = 'p'`); n != 0 {
		t.Errorf("a record whose revision is stamped 97 h ahead outlived two windows: %d stored", n)
	}
}
