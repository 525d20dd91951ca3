package workload

import (
	"bytes"
	"math/rand/v2"
)

// Window sizes bound the generator's memory whatever the stream length.
const (
	// postWindow recent posts are candidates for updates, deletes and
	// replies.
	postWindow = 1 << 16
	// followWindow recent stream follows are candidates for unfollows.
	followWindow = 1 << 14
	// dupWindow recent frames are candidates for re-sending.
	dupWindow = 256
	// retries bounds the search for a live post or follow in a window.
	retries = 16
	// replyShare of post creates are replies to a recent post.
	replyShare = 0.1
	// seedUnfollowShare of follow deletes remove a seed follow; the rest
	// remove a follow made during the stream.
	seedUnfollowShare = 0.5
)

// Stream is the main stream: an endless, deterministic run of commits in
// the proportions of Config.Mix, time_us strictly increasing from
// Config.StartUS (except duplicates, which repeat an earlier frame). Take
// as many frames as the benchmark needs; the stream never ends.
type Stream struct {
	w *Workload
	r *rand.Rand
	// cumulative thresholds of the fresh kinds, and the shares of
	// malformed and duplicate frames
	thresholds [5]float64
	malformed  float64
	duplicate  float64

	t      int64 // time_us of the newest fresh frame
	counts [numKinds]int

	posts       [postWindow]postRef
	postCount   int
	follows     [followWindow]followRef
	followCount int
	// unfollowedSeed holds the seed follows already deleted, as
	// viewer<<32 | index: about 1% of the stream's length.
	unfollowedSeed map[uint64]struct{}

	dups     [dupWindow][]byte
	dupTimes [dupWindow]int64
	dupCount int

	buf       []byte
	followees []int32
}

// followRef names a follow created during the stream.
type followRef struct {
	follower int32
	clock    uint16
	live     bool
	rkeyUS   int64
}

// Stream returns the main stream from its first frame.
func (w *Workload) Stream() *Stream {
	m := w.cfg.Mix
	s := &Stream{
		w:              w,
		r:              rand.New(rand.NewPCG(w.cfg.Seed^saltStream, 0)),
		malformed:      m.Malformed,
		duplicate:      m.Duplicate,
		t:              w.cfg.StartUS - 1,
		unfollowedSeed: map[uint64]struct{}{},
		buf:            make([]byte, 0, 1024),
	}
	total := m.PostCreate + m.PostUpdate + m.PostDelete + m.FollowCreate + m.FollowDelete
	acc := 0.0
	for i, v := range []float64{m.PostCreate, m.PostUpdate, m.PostDelete, m.FollowCreate, m.FollowDelete} {
		acc += v / total
		s.thresholds[i] = acc
	}
	s.thresholds[4] = 1
	return s
}

// Counts returns how many frames of each kind Next has returned, indexed
// by Kind.
func (s *Stream) Counts() [numKinds]int { return s.counts }

// Count is how many frames Next has returned.
func (s *Stream) Count() int {
	n := 0
	for _, c := range s.counts {
		n += c
	}
	return n
}

// Next returns the next frame. Frame.Data is valid until the next call.
func (s *Stream) Next() Frame {
	f := s.next()
	s.counts[f.Kind]++
	return f
}

func (s *Stream) next() Frame {
	u := s.r.Float64()
	switch {
	case u < s.malformed:
		return s.malformedFrame()
	case u < s.malformed+s.duplicate && s.dupCount > 0:
		i := s.r.IntN(min(s.dupCount, dupWindow))
		return Frame{Data: s.dups[i], TimeUS: s.dupTimes[i], Kind: KindDuplicate}
	}
	f := s.fresh()
	// Keep a copy for re-sending, in a reused buffer.
	i := s.dupCount % dupWindow
	s.dups[i] = append(s.dups[i][:0], f.Data...)
	s.dupTimes[i] = f.TimeUS
	s.dupCount++
	return f
}

// tick advances the stream clock by 1 µs to 2 ms (a mean of 1,000 events
// per simulated second) and draws a clock id for the frame's TIDs.
func (s *Stream) tick() (int64, uint16) {
	s.t += 1 + s.r.Int64N(1999)
	return s.t, uint16(s.r.IntN(1024))
}

func (s *Stream) fresh() Frame {
	u := s.r.Float64()
	kind := KindPostCreate
	for i, th := range s.thresholds {
		if u < th {
			kind = Kind(int(KindPostCreate) + i)
			break
		}
	}
	t, clock := s.tick()
	switch kind {
	case KindPostUpdate:
		if p := s.livePost(); p != nil {
			s.buf = appendPost(s.buf[:0], s.r, "update", p, t, clock, nil)
			return Frame{Data: s.buf, TimeUS: t, Kind: kind}
		}
	case KindPostDelete:
		if p := s.livePost(); p != nil {
			p.live = false
			s.buf = appendDelete(s.buf[:0], int(p.author), postNSID, t, clock, p.rkeyUS, p.clock)
			return Frame{Data: s.buf, TimeUS: t, Kind: kind}
		}
	case KindFollowCreate:
		return s.follow(t, clock)
	case KindFollowDelete:
		if s.r.Float64() >= seedUnfollowShare {
			if f := s.liveFollow(); f != nil {
				f.live = false
				s.buf = appendDelete(s.buf[:0], int(f.follower), followNSID, t, clock, f.rkeyUS, f.clock)
				return Frame{Data: s.buf, TimeUS: t, Kind: kind}
			}
		}
		if v, j, ok := s.seedFollow(); ok {
			s.buf = appendDelete(s.buf[:0], v, followNSID, t, clock, s.w.seedFollowUS(v, j), 0)
			return Frame{Data: s.buf, TimeUS: t, Kind: kind}
		}
	}
	// A post create, or the fallback when nothing was there to update or
	// delete (only at the very start of a stream).
	return s.post(t, clock)
}

func (s *Stream) post(t int64, clock uint16) Frame {
	p := postRef{
		author:    s.w.byActivity[s.w.activity.draw(s.r)],
		clock:     clock,
		live:      true,
		rkeyUS:    t,
		createdUS: t - s.r.Int64N(2_000_000), // clients stamp a little before the relay sees it
	}
	var reply *postRef
	if s.r.Float64() < replyShare {
		reply = s.livePost()
	}
	s.buf = appendPost(s.buf[:0], s.r, "create", &p, t, clock, reply)
	s.posts[s.postCount%postWindow] = p
	s.postCount++
	return Frame{Data: s.buf, TimeUS: t, Kind: KindPostCreate}
}

// follow creates a follow of an account drawn by popularity that the
// follower does not follow in the seed graph, so that the stream's follow
// creates exercise a new followee's merge. Drawn blindly, about a third
// of them repeated a popular account the viewer already followed (a
// review measured 35% at the default size). Past retries draws, the last
// is kept: a viewer whose seed graph holds nearly all of the head.
func (s *Stream) follow(t int64, clock uint16) Frame {
	follower := s.r.IntN(s.w.cfg.Viewers)
	s.followees = s.w.Followees(follower, s.followees)
	subject := follower
	for try := 0; subject == follower || (try <= retries && containsInt32(s.followees, int32(subject))); try++ {
		subject = int(s.w.byPopularity[s.w.popularity.draw(s.r)])
	}
	s.buf = appendFollow(s.buf[:0], follower, subject, t, t, clock, s.r.Uint64())
	s.follows[s.followCount%followWindow] = followRef{follower: int32(follower), clock: clock, live: true, rkeyUS: t}
	s.followCount++
	return Frame{Data: s.buf, TimeUS: t, Kind: KindFollowCreate}
}

// livePost picks a live post from the window, or nil.
func (s *Stream) livePost() *postRef {
	n := min(s.postCount, postWindow)
	for range retries {
		if n == 0 {
			return nil
		}
		if p := &s.posts[s.r.IntN(n)]; p.live {
			return p
		}
	}
	return nil
}

func (s *Stream) liveFollow() *followRef {
	n := min(s.followCount, followWindow)
	for range retries {
		if n == 0 {
			return nil
		}
		if f := &s.follows[s.r.IntN(n)]; f.live {
			return f
		}
	}
	return nil
}

// seedFollow picks a seed follow not deleted yet: a random viewer's
// random followee, recomputed from the graph.
func (s *Stream) seedFollow() (viewer, index int, ok bool) {
	for range retries {
		v := s.r.IntN(s.w.cfg.Viewers)
		s.followees = s.w.Followees(v, s.followees)
		j := s.r.IntN(len(s.followees))
		key := uint64(v)<<32 | uint64(j)
		if _, done := s.unfollowedSeed[key]; done {
			continue
		}
		s.unfollowedSeed[key] = struct{}{}
		return v, j, true
	}
	return 0, 0, false
}

// Malformed variants: each breaks one rule the decoder enforces, and all
// but the last keep a readable time_us so the cursor can move past them.
var malformedEdits = []struct{ old, new string }{
	{`"did":"did:plc:`, `"did":"plc:`},                               // not a DID
	{`"$type":"app.bsky.feed.post"`, `"$type":"app.bsky.feed.like"`}, // $type is not the collection
	{`"rev":"`, `"rev":"","x":"`},                                    // empty rev
	{`"text":"`, "\"text\":\"\xff"},                                  // invalid UTF-8
	{`"rkey":"`, `"rkey":"bad/`},                                     // invalid record key
	{`"cid":"bafyrei`, `"cid":"Qmb`},                                 // a CIDv0 (its last occurrence is the commit's)
	{`"subject":"did:plc:`, `"subject":"@`},                          // a follow whose subject is no DID
}

func (s *Stream) malformedFrame() Frame {
	t, clock := s.tick()
	variant := s.r.IntN(len(malformedEdits) + 2)
	var b []byte
	switch {
	case variant == len(malformedEdits): // cut short: not JSON
		p := postRef{author: int32(s.r.IntN(s.w.cfg.Accounts)), clock: clock, rkeyUS: t, createdUS: t}
		b = appendPost(s.buf[:0], s.r, "create", &p, t, clock, nil)
		b = b[:len(b)/2]
	case variant == len(malformedEdits)+1: // not even the start of JSON
		b = append(s.buf[:0], "\x00\x01 not json"...)
	default:
		e := malformedEdits[variant]
		if e.old == `"subject":"did:plc:` {
			b = appendFollow(s.buf[:0], s.r.IntN(s.w.cfg.Viewers), s.r.IntN(s.w.cfg.Accounts), t, t, clock, s.r.Uint64())
		} else {
			p := postRef{author: int32(s.r.IntN(s.w.cfg.Accounts)), clock: clock, rkeyUS: t, createdUS: t}
			b = appendPost(s.buf[:0], s.r, "create", &p, t, clock, nil)
		}
		if e.old == `"cid":"bafyrei` {
			// The record carries no CID; the commit's cid is the last one.
			i := bytes.LastIndex(b, []byte(e.old))
			b = append(b[:i:i], append([]byte(e.new), b[i+len(e.old):]...)...)
		} else {
			b = bytes.Replace(b, []byte(e.old), []byte(e.new), 1)
		}
	}
	s.buf = b
	return Frame{Data: b, TimeUS: t, Kind: KindMalformed}
}
