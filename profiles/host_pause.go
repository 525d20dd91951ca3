package profiles

import (
	"errors"

	"github.com/atfeeds/appview/pds"
)

// A PDS host that answers a profile request with 429 is rate limiting
// us, not one account: it is paused as pds.HostPauses describes, in the
// list the daemon's backfill and notifyOfUpdate share with the fetcher
// (Config.HostPauses), and no profile request is sent to it until the
// time it gave. Holding back only the account whose request
// met the limit, the fetcher went on asking the host for each of its
// other accounts, and each met the limit in turn
// (TestAHostThatAnswered429IsNotAskedUntilItsPauseEnds).
//
// A job whose host is paused is not parked, nor does it wait in a worker
// for the pause: it ends at once (outcomeHostPaused) and its account is
// held back until the pause ends, so the read that queued it answers
// without the profile, and a later read fetches it.

// hostPaused tells whether host asked us to wait; if so, j is to be held
// back until it may be asked again (j.pausedUntil). The job whose own
// request met the 429 is held back so too, not for RetryAfter: its
// account did nothing wrong.
func (s *Service) hostPaused(j *job, host string) bool {
	now := s.cfg.Now()
	err := s.paused.Check(host, now)
	if err == nil {
		return false
	}
	var pe *pds.Error
	if errors.As(err, &pe) {
		j.pausedUntil = now.Add(pe.RetryAfter)
	}
	return true
}
