// Package workload generates a deterministic, Jetstream-shaped benchmark
// workload: a population of accounts, a Zipf-like follow graph among them,
// and a stream of post and follow commits with the duplicates and junk a
// real firehose carries.
//
// The same Config (seed included) always yields the same bytes. Nothing is
// held per frame: the generator keeps the graph's parameters (two
// permutations and two Zipf tables, O(Accounts)), a bounded window of
// recent posts and follows to delete and update, and a set of the seed
// follows it has deleted, so a stream of any length runs in a few MB.
//
// The initial follow graph is a separate seeding stream (Workload.Graph):
// one follow create per edge, with time_us before the first event of the
// main stream (Workload.Stream). A benchmark plays the seed first, waits
// until it is applied, and times the main stream alone.
package workload

import (
	"errors"
	"fmt"
)

// Config describes a workload. Start from DefaultConfig.
type Config struct {
	// Seed selects the workload; the same Config always gives the same
	// frames.
	Seed uint64
	// Accounts is the population: every author and every followed account
	// is one of them.
	Accounts int
	// Viewers are the accounts that follow others (accounts 0 … Viewers-1):
	// with index_all, exactly the accounts whose feeds are kept.
	Viewers int
	// Follows is the mean number of accounts a viewer follows in the seed
	// graph; each viewer's count is uniform in [Follows/2, Follows*3/2].
	Follows int
	// FollowSkew is the Zipf exponent of popularity: the account of
	// popularity rank r is picked as a followee with weight 1/r^FollowSkew.
	// At 1.0 over 100k accounts the top ten are followed by most viewers.
	FollowSkew float64
	// PostSkew is the Zipf exponent of posting activity. Posting ranks are
	// a permutation independent of popularity.
	PostSkew float64
	// Mix is the share of each kind of frame in the main stream.
	Mix Mix
	// StartUS is the time_us of the first main-stream event; the seeding
	// stream ends just before it.
	StartUS int64
}

// Mix weighs the kinds of frames in the main stream. Duplicate and
// Malformed are shares of all frames; the other five are relative weights
// of the fresh, valid commits that make up the rest.
type Mix struct {
	PostCreate   float64
	PostUpdate   float64
	PostDelete   float64
	FollowCreate float64
	FollowDelete float64
	// Duplicate is the share of frames that re-send a recent frame byte
	// for byte, as a reconnect replay does.
	Duplicate float64
	// Malformed is the share of frames the decoder must drop.
	Malformed float64
}

// DefaultMix is about 85% post creates, 5% post deletes, 8% follow creates
// and 2% follow deletes, with 1% post updates taken from the creates, plus
// 0.5% duplicates and 0.1% malformed frames.
func DefaultMix() Mix {
	return Mix{
		PostCreate:   0.84,
		PostUpdate:   0.01,
		PostDelete:   0.05,
		FollowCreate: 0.08,
		FollowDelete: 0.02,
		Duplicate:    0.005,
		Malformed:    0.001,
	}
}

// DefaultConfig is the full-size workload of issue 7: 100k accounts, 10k
// viewers following 200 accounts on average.
func DefaultConfig() Config {
	return Config{
		Seed:       1,
		Accounts:   100_000,
		Viewers:    10_000,
		Follows:    200,
		FollowSkew: 1.0,
		PostSkew:   1.0,
		Mix:        DefaultMix(),
		StartUS:    1_767_225_600_000_000, // 2026-01-01T00:00:00Z
	}
}

// Validate reports the first problem with c, naming the field.
func (c Config) Validate() error {
	switch {
	case c.Accounts < 2:
		return errors.New("accounts: must be at least 2")
	case c.Accounts > 1<<31-1:
		return errors.New("accounts: must fit in an int32")
	case c.Viewers < 1 || c.Viewers > c.Accounts:
		return fmt.Errorf("viewers: must be between 1 and accounts (%d)", c.Accounts)
	case c.Follows < 1:
		return errors.New("follows: must be positive")
	case c.maxDegree() > (c.Accounts-1)/2:
		return fmt.Errorf("follows: %d×3/2 must be at most half of accounts-1 (%d)", c.Follows, (c.Accounts-1)/2)
	case c.FollowSkew <= 0:
		return errors.New("follow_skew: must be positive")
	case c.PostSkew <= 0:
		return errors.New("post_skew: must be positive")
	case c.StartUS < 1e15:
		return errors.New("start_us: must be a unix-microsecond time (≥ 1e15)")
	}
	m := c.Mix
	for _, w := range []struct {
		name string
		v    float64
	}{
		{"post_create", m.PostCreate}, {"post_update", m.PostUpdate}, {"post_delete", m.PostDelete},
		{"follow_create", m.FollowCreate}, {"follow_delete", m.FollowDelete},
		{"duplicate", m.Duplicate}, {"malformed", m.Malformed},
	} {
		if w.v < 0 {
			return fmt.Errorf("mix.%s: must not be negative", w.name)
		}
	}
	if m.PostCreate <= 0 {
		return errors.New("mix.post_create: must be positive (deletes and updates need posts)")
	}
	if m.Duplicate+m.Malformed >= 1 {
		return errors.New("mix: duplicate + malformed must be below 1")
	}
	return nil
}

// maxDegree is the largest number of seed follows a viewer can have.
func (c Config) maxDegree() int { return c.Follows/2 + c.Follows }

// Kind is what a frame of the workload is.
type Kind uint8

const (
	KindFollowSeed Kind = iota // a follow create of the seeding stream
	KindPostCreate
	KindPostUpdate
	KindPostDelete
	KindFollowCreate
	KindFollowDelete
	KindDuplicate // a verbatim re-send of a recent valid frame
	KindMalformed // a frame the decoder must drop
	numKinds
)

// String names the kind, in the spelling the bench prints.
func (k Kind) String() string {
	switch k {
	case KindFollowSeed:
		return "follow_seed"
	case KindPostCreate:
		return "post_create"
	case KindPostUpdate:
		return "post_update"
	case KindPostDelete:
		return "post_delete"
	case KindFollowCreate:
		return "follow_create"
	case KindFollowDelete:
		return "follow_delete"
	case KindDuplicate:
		return "duplicate"
	case KindMalformed:
		return "malformed"
	}
	return "unknown"
}

// Kinds lists every kind in order, for reports.
func Kinds() []Kind {
	out := make([]Kind, numKinds)
	for i := range out {
		out[i] = Kind(i)
	}
	return out
}

// Frame is one generated Jetstream frame.
type Frame struct {
	// Data is the frame's JSON. It is only valid until the next call to
	// the iterator that returned it; copy it to keep it.
	Data []byte
	// TimeUS is the frame's time_us. A duplicate carries the time of the
	// frame it repeats (older than the frames around it); a malformed
	// frame carries the stream time at its position even when its bytes
	// have none.
	TimeUS int64
	Kind   Kind
}
