package feeds

import (
	"cmp"
	"slices"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// accountSchedule places a batch's account events among its changes in
// stream order (time_us), so a batch ends as one event a batch would:
//
//   - an account event goes after every change of its own account older
//     than it, wherever that change arrived: a deletion must find, and bury,
//     the creates before it, and a replayed one (the reconnect rewind) is
//     applied before it rather than stored after it with no tombstone;
//   - otherwise before the first change newer than it, of any account: a
//     viewer's deletion takes its follows out of scope before another
//     viewer's later follow could keep them in;
//   - one account's events keep their order; the rest go after the last
//     change.
//
// After a failover events of different accounts may arrive out of stream
// order, so the events are taken by time, and where the two rules disagree
// the first wins.
type accountSchedule struct {
	pending []scheduledAccount
}

type scheduledAccount struct {
	a *AccountStatus
	// after is the index of the last change of the same account older than
	// the event, -1 if none: the event waits until it is applied.
	after int
}

func newAccountSchedule(b *Batch) *accountSchedule {
	s := &accountSchedule{}
	if len(b.Accounts) == 0 {
		return s
	}
	s.pending = make([]scheduledAccount, len(b.Accounts))
	byDID := make(map[syntax.DID][]int, len(b.Accounts))
	for i := range b.Accounts {
		s.pending[i] = scheduledAccount{a: &b.Accounts[i], after: -1}
		byDID[b.Accounts[i].DID] = append(byDID[b.Accounts[i].DID], i)
	}
	for ci := range b.Changes {
		c := &b.Changes[ci]
		for _, ai := range byDID[c.DID] {
			if c.TimeUS < s.pending[ai].a.TimeUS {
				s.pending[ai].after = ci
			}
		}
	}
	slices.SortStableFunc(s.pending, func(x, y scheduledAccount) int { return cmp.Compare(x.a.TimeUS, y.a.TimeUS) })
	return s
}

// before returns the events to apply before change i, at stream time
// timeUS, in order, and takes them off the schedule.
func (s *accountSchedule) before(i int, timeUS int64) []*AccountStatus {
	if len(s.pending) == 0 || s.pending[0].a.TimeUS >= timeUS {
		return nil
	}
	var due []*AccountStatus
	var blocked map[syntax.DID]bool
	kept := s.pending[:0]
	for n, p := range s.pending {
		if p.a.TimeUS >= timeUS {
			kept = append(kept, s.pending[n:]...)
			break
		}
		if p.after >= i || blocked[p.a.DID] {
			// Its account's older change is still to come; its account's
			// later events wait behind it.
			if blocked == nil {
				blocked = map[syntax.DID]bool{}
			}
			blocked[p.a.DID] = true
			kept = append(kept, p)
			continue
		}
		due = append(due, p.a)
	}
	s.pending = kept
	return due
}

// rest returns the events still to apply once every change is in.
func (s *accountSchedule) rest() []*AccountStatus {
	out := make([]*AccountStatus, len(s.pending))
	for i, p := range s.pending {
		out[i] = p.a
	}
	s.pending = nil
	return out
}

// leave returns the events still scheduled, in the order the batch held
// them (one account's keep their order), written over the front of
// accounts, the batch's slice they point into, and takes them off the
// schedule: a batch stopped part way (OpenBatch.AddUntil) keeps them for
// the next.
func (s *accountSchedule) leave(accounts []AccountStatus) []AccountStatus {
	kept := make(map[*AccountStatus]bool, len(s.pending))
	for _, p := range s.pending {
		kept[p.a] = true
	}
	s.pending = nil
	out := accounts[:0]
	for i := range accounts {
		if kept[&accounts[i]] {
			out = append(out, accounts[i])
		}
	}
	clear(accounts[len(out):])
	return out
}
