package backfill

import (
	"time"

	"github.com/atfeeds/appview/pds"
)

// Hosts that answered 429 are paused as pds.HostPauses describes: every
// listing on that host waits until the time it asked for, and no request
// is sent to it meanwhile.

// defaultHostPause is how long a host that answered 429 without a
// Retry-After is left alone.
const defaultHostPause = pds.DefaultHostPause

// hostKey is what the per-host request limit and the pause map count a
// PDS endpoint under (pds.HostKey); profiles and notify key by host too.
func hostKey(endpoint string) string { return pds.HostKey(endpoint) }

// errHostPaused is the cause of a listing failed without a request,
// because its host asked us to wait.
var errHostPaused = pds.ErrHostPaused

// hostPaused returns the rate-limit error a request to host (a hostKey)
// meets without being sent, while the host is paused.
func (s *Service) hostPaused(host string, now time.Time) error {
	return s.paused.Check(host, now)
}

// notePause pauses host after err, when err is its 429.
func (s *Service) notePause(host string, err error, now time.Time) {
	s.paused.Note(host, err, now)
}
