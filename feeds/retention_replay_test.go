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
func TestAReplayedUpdateDoesNotBringBackARetiredRecord(t *testing.T) {
	s := openSweep(t, t.TempDir()+"/appview.db", followingPosts(1),
		SweepOptions{Retention: time.Hour, TombstoneWindow: 2 * time.Hour})
	apply(t, s, follow("v", "alice", "f", 1), post("alice", "p", 2), post("alice", "q", 3))
	tick(t, s, t0, true) // cap 1: p trimmed from v's feed
	if got := feedRKeys(t, s, "following", "v", postNSID); !slices.Equal(got, []string{"q"}) {
		t.Fatalf("feed after sweep = %v, want [q]", got)
	}
	// alice edits p at 2 h of event time (an update keeps indexed_us).
	upd := post("alice", "p", 2*hourUS)
	upd.Op, upd.CID = OpUpdate, "bafyedited"
	apply(t, s, upd)
	tick(t, s, t0.Add(time.Minute), false)
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
	apply(t, s, post("alice", "r", 4*hourUS))
	res := tick(t, s, t0.Add(2*time.Minute), false)
	if n := count(t, s, `SELECT count(*) FROM records r JOIN actors a ON a.id = r.actor_id WHERE r.rkey = 'p'`); n != 0 {
		t.Errorf("p still stored after its edit aged past the window (%+v)", res)
	}
}
