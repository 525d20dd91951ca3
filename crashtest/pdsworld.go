package crashtest

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/directory/plctest"
	"github.com/atfeeds/appview/pds/pdstest"
	"github.com/atfeeds/appview/workload"
)

// The collections of the first-read crash test's feed.
const (
	followNSID = syntax.NSID(workload.FollowCollection)
	postNSID   = syntax.NSID(workload.PostCollection)
)

// FirstReadLimits are the daemon's first-read bounds the world's expected
// feeds respect (backfill.depth, backfill.max_follows, the feed's cap).
type FirstReadLimits struct {
	Depth, MaxFollows, Cap int
}

// PDSWorldConfig sizes a PDSWorld.
type PDSWorldConfig struct {
	Seed uint64
	// Viewers are accounts 0..Viewers-1, authors the next Authors; Unknown
	// more are followed but in no directory (their listings fail).
	Viewers, Authors, Unknown int
	// PDSes hosts the accounts round robin.
	PDSes int
	// Window is how far apart the blocks of authors that consecutive
	// viewers follow start, so that every new viewer brings accounts
	// nobody fetched yet.
	Window int
	Limits FirstReadLimits
}

// PDSWorld is a fake atproto network for first reads: a PLC directory
// and a few PDSes on loopback holding follow and post records generated
// from a seed, and the expected state, computed from those records and
// the limits alone (not with the daemon's code): a listing is the newest
// records by record key, up to its limit; a viewer's followees are the
// distinct subjects of its listed follows other than itself; its feed is
// the listed posts of its followees, newest position first, up to the
// cap, where a post's position is min(TID time, createdAt) and its
// indexed time the TID time, or the time a listing stored it when later
// (indexedOK).
type PDSWorld struct {
	Config PDSWorldConfig
	PLC    *plctest.Server
	PDSes  []*pdstest.Server
	// madeUS is when the world was made, before any run listed a record.
	madeUS int64

	accounts map[string]int32 // DID → index, registered or not
	// follows and posts hold each account's records, newest key first.
	follows map[int32][]worldFollow
	posts   map[int32][]worldPost
}

type worldFollow struct {
	rkey    string
	subject int32
}

type worldPost struct {
	rkey      string
	cid       string
	sortUS    int64
	indexedUS int64
}

// NewPDSWorld generates the records and starts the servers; Close stops
// them.
func NewPDSWorld(cfg PDSWorldConfig) *PDSWorld {
	w := &PDSWorld{
		Config:   cfg,
		PLC:      plctest.NewServer(),
		accounts: map[string]int32{},
		follows:  map[int32][]worldFollow{},
		posts:    map[int32][]worldPost{},
	}
	for range cfg.PDSes {
		w.PDSes = append(w.PDSes, pdstest.NewServer())
	}
	registered := cfg.Viewers + cfg.Authors
	for i := range registered + cfg.Unknown {
		d := did(int32(i))
		w.accounts[d] = int32(i)
		if i < registered {
			pds := w.PDSes[i%len(w.PDSes)]
			w.PLC.Add(syntax.DID(d), "", pds.URL())
			pds.AddRepo(syntax.DID(d))
		}
	}
	g := worldGen{w: w, rng: rand.New(rand.NewPCG(cfg.Seed, 2)), used: map[int64]bool{},
		base: time.Now().Add(-31 * 24 * time.Hour).Truncate(time.Second).UnixMicro()}
	for i := range registered {
		n := g.postCount(i < cfg.Viewers)
		for range n {
			g.post(int32(i))
		}
	}
	for v := range cfg.Viewers {
		g.followsOf(int32(v))
	}
	for a := range w.follows {
		slices.SortFunc(w.follows[a], func(x, y worldFollow) int { return cmp.Compare(y.rkey, x.rkey) })
	}
	for a := range w.posts {
		slices.SortFunc(w.posts[a], func(x, y worldPost) int { return cmp.Compare(y.rkey, x.rkey) })
	}
	w.madeUS = time.Now().UnixMicro()
	return w
}

// indexedOK says whether got is a listed post's indexed time, stored or
// served, for one whose TID time is want. Jetstream is silent, so the
// stream never moves the cursor, and a listing stores a post at its own
// time, a later listing of it moving it on (feeds.listedStreamTime):
// not before want nor the world's making, and not after now.
func (w *PDSWorld) indexedOK(got, want int64) bool {
	return got >= max(want, w.madeUS) && got <= time.Now().UnixMicro()
}

// Close stops the servers.
func (w *PDSWorld) Close() {
	w.PLC.Close()
	for _, s := range w.PDSes {
		s.Close()
	}
}

// Viewers returns the viewers' indexes.
func (w *PDSWorld) Viewers() []int32 {
	out := make([]int32, w.Config.Viewers)
	for i := range out {
		out[i] = int32(i)
	}
	return out
}

// Counts returns how many follow and post records the PDSes hold.
func (w *PDSWorld) Counts() (follows, posts int) {
	for _, f := range w.follows {
		follows += len(f)
	}
	for _, p := range w.posts {
		posts += len(p)
	}
	return follows, posts
}

// worldGen generates records with distinct times: every TID time and
// every feed position is unique, so the expected feed order needs no
// tiebreak.
type worldGen struct {
	w    *PDSWorld
	rng  *rand.Rand
	used map[int64]bool // TID times and positions taken
	base int64
}

// postCount picks how many posts an account has, around the depth: none,
// one short page, up to the depth, or more than the depth.
func (g *worldGen) postCount(viewer bool) int {
	d := g.w.Config.Limits.Depth
	switch r := g.rng.Float64(); {
	case viewer:
		return g.rng.IntN(30)
	case r < 0.1:
		return 0
	case r < 0.35:
		return 1 + g.rng.IntN(99)
	case r < 0.6:
		return 100 + g.rng.IntN(max(1, d-99))
	default:
		return d + 1 + g.rng.IntN(d)
	}
}

// unique returns a time near t (in µs, congruent to t mod 1000) nobody
// took yet.
func (g *worldGen) unique(t int64) int64 {
	for g.used[t] {
		t += 1000
	}
	g.used[t] = true
	return t
}

func (g *worldGen) post(author int32) {
	// Each author posts over its own span, from an hour to a month, so
	// prolific authors' older posts compete with others' newest.
	span := int64(time.Hour/time.Microsecond) << g.rng.IntN(10)
	t := g.unique(g.base + g.rng.Int64N(span)/1000*1000)
	created, sortUS := t, t
	switch r := g.rng.Float64(); {
	case r < 0.15:
		// Backdated: the position is createdAt, off the millisecond grid
		// of TID times so it collides with none of them.
		sortUS = g.unique(t - 500 - g.rng.Int64N(3600)*1_000_000)
		created = sortUS
	case r < 0.25:
		created = t + int64(time.Hour/time.Microsecond) // future-dated: the TID time wins
	}
	rkey := string(syntax.NewTIDFromTime(time.UnixMicro(t), 0))
	n := len(g.w.posts[author])
	value := fmt.Sprintf(`{"$type":"app.bsky.feed.post","text":"post %d of %s","createdAt":%q}`,
		n, did(author), time.UnixMicro(created).UTC().Format("2006-01-02T15:04:05.000000Z"))
	cid := g.w.pdsOf(author).AddRecord(syntax.DID(did(author)), postNSID, syntax.RecordKey(rkey), value)
	g.w.posts[author] = append(g.w.posts[author], worldPost{rkey: rkey, cid: cid, sortUS: sortUS, indexedUS: t})
}

// followsOf gives viewer v a block of authors starting v*Window in (one
// viewer in three a few dozen, the others up to MaxFollows+120), a few
// other viewers and unknown accounts, sometimes itself and sometimes a
// second follow of one subject, at random times: the newest MaxFollows of
// them are what a listing gets.
func (g *worldGen) followsOf(v int32) {
	cfg := g.w.Config
	n := 30 + g.rng.IntN(cfg.Limits.MaxFollows+90)
	if v%3 == 0 {
		n = 3 + g.rng.IntN(25) // a feed under the cap, a first read that can end between kills
	}
	var subjects []int32
	for i := range n {
		switch r := g.rng.Float64(); {
		case r < 0.05:
			subjects = append(subjects, g.rng.Int32N(int32(cfg.Viewers)))
		case r < 0.07 && cfg.Unknown > 0:
			subjects = append(subjects, int32(cfg.Viewers+cfg.Authors+g.rng.IntN(cfg.Unknown)))
		default:
			subjects = append(subjects, int32(cfg.Viewers+(int(v)*cfg.Window+i)%cfg.Authors))
		}
	}
	if g.rng.IntN(10) == 0 {
		subjects = append(subjects, v)
	}
	for range g.rng.IntN(4) {
		subjects = append(subjects, subjects[g.rng.IntN(len(subjects))])
	}
	for _, s := range subjects {
		t := g.unique(g.base + g.rng.Int64N(int64(30*24*time.Hour/time.Microsecond))/1000*1000)
		rkey := string(syntax.NewTIDFromTime(time.UnixMicro(t), 0))
		value := fmt.Sprintf(`{"$type":"app.bsky.graph.follow","subject":%q,"createdAt":%q}`,
			did(s), time.UnixMicro(t).UTC().Format(time.RFC3339Nano))
		g.w.pdsOf(v).AddRecord(syntax.DID(did(v)), followNSID, syntax.RecordKey(rkey), value)
		g.w.follows[v] = append(g.w.follows[v], worldFollow{rkey: rkey, subject: s})
	}
}

func (w *PDSWorld) pdsOf(a int32) *pdstest.Server { return w.PDSes[int(a)%len(w.PDSes)] }

func (w *PDSWorld) registered(a int32) bool {
	return int(a) < w.Config.Viewers+w.Config.Authors
}

// listedFollows is what a complete listing of a's follows stores.
func (w *PDSWorld) listedFollows(a int32) []worldFollow {
	f := w.follows[a]
	return f[:min(len(f), w.Config.Limits.MaxFollows)]
}

// listedPosts is what a complete listing of a's posts stores.
func (w *PDSWorld) listedPosts(a int32) []worldPost {
	p := w.posts[a]
	return p[:min(len(p), w.Config.Limits.Depth)]
}

// Followees returns the distinct accounts viewer v's listed follows name,
// other than v.
func (w *PDSWorld) Followees(v int32) []int32 {
	var out []int32
	for _, f := range w.listedFollows(v) {
		if f.subject != v && !slices.Contains(out, f.subject) {
			out = append(out, f.subject)
		}
	}
	return out
}

// Feed returns viewer v's expected feed, newest position first.
func (w *PDSWorld) Feed(v int32) []FeedPost {
	var out []FeedPost
	for _, a := range w.Followees(v) {
		if !w.registered(a) {
			continue
		}
		for _, p := range w.listedPosts(a) {
			out = append(out, FeedPost{Author: a, RKey: p.rkey, CID: p.cid, SortUS: p.sortUS, IndexedUS: p.indexedUS})
		}
	}
	slices.SortFunc(out, func(x, y FeedPost) int { return cmp.Compare(y.SortUS, x.SortUS) })
	return out[:min(len(out), w.Config.Limits.Cap)]
}

// FeedPost is one item of an expected feed.
type FeedPost struct {
	Author    int32
	RKey      string
	CID       string
	SortUS    int64
	IndexedUS int64
}
