package crashtest

import (
	"slices"
	"strings"
	"testing"

	"github.com/atfeeds/appview/jetstream/jetstreamtest"
	"github.com/atfeeds/appview/workload"
)

// The model is the crash tests' oracle: these check it on hand-written
// logs, so a crash test failure points at the daemon, not at the model.

func modelOf(t *testing.T, frames ...[]byte) *Model {
	t.Helper()
	w, err := workload.New(workload.Config{
		Seed: 1, Accounts: 10, Viewers: 2, Follows: 2, FollowSkew: 1, PostSkew: 1,
		Mix: workload.DefaultMix(), StartUS: 1_767_225_600_000_000,
	})
	if err != nil {
		t.Fatal(err)
	}
	l := &Log{Workload: w}
	for _, f := range frames {
		l.Frames = append(l.Frames, workload.Frame{Data: f, TimeUS: int64(len(l.Frames) + 1), Kind: workload.KindPostCreate})
	}
	m := NewModel(l)
	if err := m.AdvanceTo(int64(len(frames))); err != nil {
		t.Fatal(err)
	}
	return m
}

const follow, post = "app.bsky.graph.follow", "app.bsky.feed.post"

func acct(i int) string { return workload.AccountDID(i) }

// feedKeys lists viewer v's feed as sorted "author/rkey" strings.
func feedKeys(m *Model, v int32) string {
	var out []string
	for k := range m.Feed(v) {
		out = append(out, strings.TrimPrefix(did(k.account), "did:plc:")[:4]+"/"+k.rkey)
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

func TestModelFollowPostDelete(t *testing.T) {
	a, b := acct(1), acct(2)
	m := modelOf(t,
		jetstreamtest.Post(b, "p1", 1_000, "before the follow"),
		jetstreamtest.Follow(follow, a, "f1", b, 2_000),
		jetstreamtest.Post(b, "p2", 3_000, "after"),
		jetstreamtest.Post(a, "own", 4_000, "own posts stay out"),
		jetstreamtest.Delete(post, b, "p1", 5_000),
	)
	if got := len(m.Feed(1)); got != 1 || m.Feed(1)[key{2, "p2"}] == nil {
		t.Fatalf("feed of a = %s, want only b/p2", feedKeys(m, 1))
	}
}

func TestModelReplaysChangeNothing(t *testing.T) {
	a, b := acct(1), acct(2)
	create := jetstreamtest.Post(b, "p1", 1_000, "x")
	fol := jetstreamtest.Follow(follow, a, "f1", b, 2_000)
	m := modelOf(t,
		create, fol,
		jetstreamtest.Delete(post, b, "p1", 3_000),
		create, // a replayed create after its delete: stays deleted
		jetstreamtest.Delete(follow, a, "f1", 4_000),
		fol, // a replayed follow after the unfollow: stays unfollowed
		jetstreamtest.Post(b, "p2", 5_000, "y"),
	)
	if n := len(m.Feed(1)); n != 0 {
		t.Fatalf("feed of a = %s, want empty", feedKeys(m, 1))
	}
	if p := m.post(2, "p1"); p == nil || p.live {
		t.Fatalf("b/p1 = %+v, want a tombstone", p)
	}
}

func TestModelUpdateKeepsPosition(t *testing.T) {
	b := acct(2)
	created := jetstreamtest.Post(b, "p1", 1_000, "x")
	updated := []byte(strings.Replace(strings.Replace(string(jetstreamtest.Post(b, "p1", 9_000, "y")),
		`"operation":"create"`, `"operation":"update"`, 1), "bafyreigwuiotmkay", "bafyreiaaaaaaaaaa", 1))
	m := modelOf(t, created, updated)
	p := m.post(2, "p1")
	if p.sortUS != 1_000 || p.indexedUS != 1_000 || !strings.HasPrefix(p.cid, "bafyreiaaaa") {
		t.Fatalf("after update: %+v, want position 1000 and the new cid", p)
	}
}

func TestModelTwoFollowsOfOneSubject(t *testing.T) {
	a, b := acct(1), acct(2)
	m := modelOf(t,
		jetstreamtest.Post(b, "p1", 1_000, "x"),
		jetstreamtest.Follow(follow, a, "f1", b, 2_000),
		jetstreamtest.Follow(follow, a, "f2", b, 3_000),
		jetstreamtest.Delete(follow, a, "f1", 4_000),
	)
	if len(m.Feed(1)) != 1 {
		t.Fatalf("feed of a = %s, want b/p1: one follow record remains", feedKeys(m, 1))
	}
}

func TestNewLogIsMonotonic(t *testing.T) {
	cfg := workload.DefaultConfig()
	cfg.Accounts, cfg.Viewers, cfg.Follows = 500, 100, 10
	cfg.Mix.Duplicate, cfg.Mix.Malformed = 0.1, 0.05
	l, err := NewLog(cfg, 5000)
	if err != nil {
		t.Fatal(err)
	}
	counts := l.Counts()
	if counts[workload.KindDuplicate] == 0 || counts[workload.KindMalformed] == 0 {
		t.Fatalf("counts %v: want duplicates and malformed frames", counts)
	}
	m := NewModel(l)
	if err := m.AdvanceTo(l.EndUS); err != nil {
		t.Fatal(err)
	}
	if m.next != len(l.Frames) {
		t.Fatalf("model applied %d of %d frames", m.next, len(l.Frames))
	}
}
