package crashtest

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/atfeeds/appview/workload"
)

// Model is the state the log should leave, computed from the frames alone
// with the rules of docs/cursors.md and the README, not with the daemon's
// code: a record is keyed by (did, collection, rkey); a write applies when
// its rev is newer than the last write applied to the key (a delete
// included), so duplicates and replays change nothing; a record's feed
// position is min(time_us, createdAt) of the write that made it live; a
// viewer's feed holds every live post of every account it follows (the
// tests configure cap and merge_limit above anything the log holds).
type Model struct {
	log  *Log
	next int // frames[:next] are applied

	accounts map[string]int32 // DID → account index
	follows  map[key]*followRec
	posts    map[key]*postRec
	// followCount[viewer][subject] counts the viewer's live follow
	// records of the subject.
	followCount map[int32]map[int32]int
	// livePosts[author] holds the author's live posts by rkey.
	livePosts map[int32]map[string]*postRec
}

type key struct {
	account int32
	rkey    string
}

type followRec struct {
	rev     string
	live    bool
	subject int32
}

type postRec struct {
	rev       string
	live      bool
	cid       string
	sortUS    int64
	indexedUS int64
}

// wire is the part of a Jetstream commit frame the model reads.
type wire struct {
	DID    string `json:"did"`
	TimeUS int64  `json:"time_us"`
	Kind   string `json:"kind"`
	Commit *struct {
		Rev        string `json:"rev"`
		Operation  string `json:"operation"`
		Collection string `json:"collection"`
		RKey       string `json:"rkey"`
		CID        string `json:"cid"`
		Record     *struct {
			CreatedAt string `json:"createdAt"`
			Subject   string `json:"subject"`
		} `json:"record"`
	} `json:"commit"`
}

// NewModel returns the model of l before any frame.
func NewModel(l *Log) *Model {
	n := l.Workload.Config().Accounts
	m := &Model{
		log:         l,
		accounts:    make(map[string]int32, n),
		follows:     map[key]*followRec{},
		posts:       map[key]*postRec{},
		followCount: map[int32]map[int32]int{},
		livePosts:   map[int32]map[string]*postRec{},
	}
	for i := range n {
		m.accounts[workload.AccountDID(i)] = int32(i)
	}
	return m
}

// AdvanceTo applies every frame up to and including time_us t. Frames
// never go back in time (NewLog), so this is a prefix of the log, and a
// stored cursor of t must mean exactly this prefix is durable.
func (m *Model) AdvanceTo(t int64) error {
	for m.next < len(m.log.Frames) && m.log.Frames[m.next].TimeUS <= t {
		if err := m.apply(m.log.Frames[m.next]); err != nil {
			return fmt.Errorf("frame %d: %w", m.next, err)
		}
		m.next++
	}
	return nil
}

func (m *Model) apply(f workload.Frame) error {
	if f.Kind == workload.KindMalformed {
		return nil // the decoder drops it (tested in package workload)
	}
	var w wire
	if err := json.Unmarshal(f.Data, &w); err != nil {
		return fmt.Errorf("decode %q: %w", f.Data, err)
	}
	c := w.Commit
	if w.Kind != "commit" || c == nil {
		return fmt.Errorf("not a commit: %q", f.Data)
	}
	author, ok := m.accounts[w.DID]
	if !ok {
		return fmt.Errorf("unknown account %s", w.DID)
	}
	k := key{author, c.RKey}
	live := c.Operation == "create" || c.Operation == "update"
	switch c.Collection {
	case workload.FollowCollection:
		rec := m.follows[k]
		if rec != nil && rec.rev >= c.Rev {
			return nil // a replay
		}
		if rec == nil {
			rec = &followRec{}
			m.follows[k] = rec
		}
		if rec.live {
			m.countFollow(author, rec.subject, -1)
		}
		rec.rev, rec.live = c.Rev, live
		if live {
			if c.Record == nil {
				return fmt.Errorf("follow without record: %q", f.Data)
			}
			subject, ok := m.accounts[c.Record.Subject]
			if !ok {
				return fmt.Errorf("follow of unknown account %s", c.Record.Subject)
			}
			rec.subject = subject
			m.countFollow(author, subject, +1)
		}
	case workload.PostCollection:
		rec := m.posts[k]
		if rec != nil && rec.rev >= c.Rev {
			return nil
		}
		if rec == nil {
			rec = &postRec{}
			m.posts[k] = rec
		}
		wasLive := rec.live
		rec.rev, rec.live = c.Rev, live
		switch {
		case live && !wasLive:
			// A new record: its position is fixed now.
			rec.cid, rec.indexedUS = c.CID, w.TimeUS
			rec.sortUS = w.TimeUS
			if c.Record != nil {
				if t, err := time.Parse(time.RFC3339Nano, c.Record.CreatedAt); err == nil && t.UnixMicro() > 0 && t.UnixMicro() < w.TimeUS {
					rec.sortUS = t.UnixMicro()
				}
			}
			if m.livePosts[author] == nil {
				m.livePosts[author] = map[string]*postRec{}
			}
			m.livePosts[author][c.RKey] = rec
		case live:
			rec.cid = c.CID // an update keeps the position
		case wasLive:
			delete(m.livePosts[author], c.RKey)
		}
	default:
		return fmt.Errorf("unexpected collection %s", c.Collection)
	}
	return nil
}

func (m *Model) countFollow(viewer, subject int32, d int) {
	if m.followCount[viewer] == nil {
		m.followCount[viewer] = map[int32]int{}
	}
	m.followCount[viewer][subject] += d
	if m.followCount[viewer][subject] == 0 {
		delete(m.followCount[viewer], subject)
	}
}

// Feed returns viewer v's feed as a set: every live post of every account
// v follows, other than v itself.
func (m *Model) Feed(v int32) map[key]*postRec {
	out := map[key]*postRec{}
	for subject := range m.followCount[v] {
		if subject == v {
			continue
		}
		for rkey, p := range m.livePosts[subject] {
			out[key{subject, rkey}] = p
		}
	}
	return out
}

// Post returns the model's record of a post, nil if it never existed.
func (m *Model) post(author int32, rkey string) *postRec { return m.posts[key{author, rkey}] }

// isFollowing reports whether v follows subject.
func (m *Model) isFollowing(v, subject int32) bool { return m.followCount[v][subject] > 0 }
