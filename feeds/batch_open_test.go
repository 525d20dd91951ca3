package feeds

import (
	"context"
	"slices"
	"testing"
)

// A batch applied in parts is one transaction: nothing of it is visible,
// nor its cursor stored, before Commit; once committed, its feeds are
// what one batch of all its changes gives. A rolled-back batch leaves
// nothing and releases the write lock.
func TestABatchAppliedInPartsCommitsOnce(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t, defaultFeeds)
	apply(t, s, follow("alice", "carol", "f1", 1), follow("bob", "dave", "f2", 2))

	o, err := s.BeginBatch(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Add(&Batch{Changes: []Change{post("carol", "p1", 10), post("dave", "p2", 11)}}); err != nil {
		t.Fatal(err)
	}
	// A follow in the second part sees the first part's posts, as in one
	// batch: bob's merge brings carol's p1.
	if err := o.Add(&Batch{Changes: []Change{follow("bob", "carol", "f3", 12), post("carol", "p3", 13)}}); err != nil {
		t.Fatal(err)
	}
	if got := feedRKeys(t, s, "following", "alice", postNSID); len(got) != 0 {
		t.Errorf("before the commit a reader sees %v", got)
	}
	res, err := o.Commit(StreamCursor{TimeUS: 13})
	if err != nil {
		t.Fatal(err)
	}
	if res.Applied != 4 || res.FanoutRows != 4 || res.MergedRows != 1 {
		t.Errorf("result %+v, want 4 applied, 4 fan-out rows (alice p1 p3, bob p2 p3), 1 merged (bob p1)", res)
	}
	if got := s.Cursor().TimeUS; got != 13 {
		t.Errorf("cursor %d, want 13", got)
	}
	for viewer, want := range map[string][]string{"alice": {"p3", "p1"}, "bob": {"p3", "p2", "p1"}} {
		if got := feedRKeys(t, s, "following", viewer, postNSID); !slices.Equal(got, want) {
			t.Errorf("%s's feed = %v, want %v", viewer, got, want)
		}
	}

	o, err = s.BeginBatch(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Add(&Batch{Changes: []Change{post("carol", "p4", 20)}}); err != nil {
		t.Fatal(err)
	}
	o.Rollback()
	o.Rollback()                              // a second call does nothing
	res = apply(t, s, post("dave", "p5", 21)) // would block on a lock left held
	if res.Applied != 1 {
		t.Errorf("batch after a rollback applied %d", res.Applied)
	}
	if got, want := feedRKeys(t, s, "following", "alice", postNSID), []string{"p3", "p1"}; !slices.Equal(got, want) {
		t.Errorf("after the rollback alice's feed = %v, want %v", got, want)
	}
	if got := s.Cursor().TimeUS; got != 21 {
		t.Errorf("cursor %d, want 21", got)
	}
}
