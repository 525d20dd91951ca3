package jetstream

import (
	"context"
	"time"
)

// backoffDelay is the wait before redial number attempt (0-based):
// exponential from lo, capped at hi, with "equal jitter": half the delay
// is fixed so a fleet never redials at once with zero wait, and half is
// random so it does not redial in lockstep either. rnd returns [0, 1).
func backoffDelay(attempt int, lo, hi time.Duration, rnd func() float64) time.Duration {
	d := lo
	for i := 0; i < attempt && d < hi; i++ {
		d *= 2
	}
	if d > hi || d <= 0 {
		d = hi
	}
	half := d / 2
	return half + time.Duration(rnd()*float64(d-half))
}

// sleepCtx waits for d or until ctx ends, whichever is first; it returns
// ctx.Err() when cut short.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
