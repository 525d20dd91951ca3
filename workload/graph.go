package workload

import (
	"fmt"
	"math/rand/v2"
)

// Workload is a validated Config with the tables its streams share. It is
// immutable and safe for concurrent use; each stream it returns is not.
type Workload struct {
	cfg Config
	// byPopularity[r] is the account of popularity rank r; byActivity[r]
	// the account of posting rank r. They are independent permutations, so
	// how much an account posts says nothing about how many follow it.
	byPopularity []int32
	byActivity   []int32
	popularity   *zipf
	activity     *zipf
	// stride spaces the seed follows of consecutive viewers in time, so a
	// seed follow's rkey (the TID of its time) can be recomputed from
	// (viewer, index) without storing it.
	stride      int64
	seedStartUS int64
}

// Stream salts keep the random sequences of the parts independent, so
// changing one part of the generator does not shift the others.
const (
	saltTables uint64 = iota + 0x7ab1e
	saltGraph
	saltStream
)

// New validates cfg and builds the shared tables: O(Accounts) memory,
// about 24 bytes per account.
func New(cfg Config) (*Workload, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("workload config: %w", err)
	}
	r := rand.New(rand.NewPCG(cfg.Seed, saltTables))
	w := &Workload{
		cfg:          cfg,
		byPopularity: permutation(cfg.Accounts, r),
		byActivity:   permutation(cfg.Accounts, r),
		popularity:   newZipf(cfg.Accounts, cfg.FollowSkew),
		stride:       int64(cfg.maxDegree() + 1),
	}
	if cfg.PostSkew == cfg.FollowSkew {
		w.activity = w.popularity
	} else {
		w.activity = newZipf(cfg.Accounts, cfg.PostSkew)
	}
	// The seed ends one second before the main stream starts.
	w.seedStartUS = cfg.StartUS - 1_000_000 - int64(cfg.Viewers)*w.stride
	return w, nil
}

// Config returns the workload's configuration.
func (w *Workload) Config() Config { return w.cfg }

// ViewerDID is the DID of viewer i (0 ≤ i < Viewers).
func (w *Workload) ViewerDID(i int) string { return AccountDID(i) }

// SeedEndUS is the time_us of the last seed follow or earlier; every
// main-stream frame is later.
func (w *Workload) SeedEndUS() int64 { return w.cfg.StartUS - 1_000_000 }

// Followees returns viewer v's seed follows, appended to dst[:0]: distinct
// accounts other than v, drawn by popularity. The list is a pure function
// of (seed, v), so the main stream can recompute it to unfollow someone
// instead of storing the graph.
func (w *Workload) Followees(v int, dst []int32) []int32 {
	dst = dst[:0]
	r := rand.New(rand.NewPCG(w.cfg.Seed^saltGraph, uint64(v)))
	n := w.cfg.Follows/2 + r.IntN(w.cfg.Follows+1)
	// A viewer follows at most a few hundred accounts: a linear scan for
	// repeats beats a map.
	for tries := 0; len(dst) < n; tries++ {
		var a int32
		if tries < 50*n {
			a = w.byPopularity[w.popularity.draw(r)]
		} else {
			// The Zipf head is exhausted (a tiny population): fill
			// uniformly. Validate keeps n below half the accounts.
			a = int32(r.IntN(w.cfg.Accounts))
		}
		if int(a) == v || containsInt32(dst, a) {
			continue
		}
		dst = append(dst, a)
	}
	return dst
}

func containsInt32(s []int32, v int32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// seedFollowUS is the time (and rkey time) of viewer v's j-th seed follow.
func (w *Workload) seedFollowUS(v, j int) int64 {
	return w.seedStartUS + int64(v)*w.stride + int64(j)
}

// GraphStream is the seeding stream: every seed follow as a follow create,
// viewer by viewer, time_us increasing.
type GraphStream struct {
	w        *Workload
	viewer   int
	index    int
	followee []int32
	buf      []byte
	n        int
}

// Graph returns the seeding stream.
func (w *Workload) Graph() *GraphStream {
	g := &GraphStream{w: w, viewer: -1}
	return g
}

// Next returns the next seed follow, or false when the graph is complete.
func (g *GraphStream) Next() (Frame, bool) {
	for g.viewer < 0 || g.index >= len(g.followee) {
		g.viewer++
		if g.viewer >= g.w.cfg.Viewers {
			return Frame{}, false
		}
		g.followee = g.w.Followees(g.viewer, g.followee)
		g.index = 0
	}
	us := g.w.seedFollowUS(g.viewer, g.index)
	g.buf = appendFollow(g.buf[:0], g.viewer, int(g.followee[g.index]), us, us, 0, splitmix64(uint64(us)))
	g.index++
	g.n++
	return Frame{Data: g.buf, TimeUS: us, Kind: KindFollowSeed}, true
}

// Count is how many frames Next has returned.
func (g *GraphStream) Count() int { return g.n }
