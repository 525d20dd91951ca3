// Package tokenbucket is the token bucket the daemon's per-client limits
// share (first-read admission, getFeed's handle lookups): state small
// enough to keep one per client, driven by the caller's clock so tests
// can step it.
package tokenbucket

import "time"

// Shape is a bucket's size and its refill rate.
type Shape struct {
	Burst, PerSecond float64
}

// Bucket is the state of a bucket of some Shape; the caller keeps the
// shape beside it and guards it.
type Bucket struct {
	tokens float64
	last   time.Time // when tokens was last brought up to date
}

// Full is a bucket of shape s holding its whole burst at now.
func Full(s Shape, now time.Time) Bucket {
	return Bucket{tokens: s.Burst, last: now}
}

// Refill brings b up to date at now; a clock that went back adds nothing.
func (b *Bucket) Refill(s Shape, now time.Time) {
	if now.After(b.last) {
		b.tokens = min(s.Burst, b.tokens+now.Sub(b.last).Seconds()*s.PerSecond)
		b.last = now
	}
}

// Has reports whether b, as last refilled, holds a whole token.
func (b *Bucket) Has() bool { return b.tokens >= 1 }

// Take spends a token; call it after Has.
func (b *Bucket) Take() { b.tokens-- }

// IsFull reports whether b, as last refilled, holds its whole burst: a
// bucket forgotten then is a bucket started over, and nothing changes.
func (b *Bucket) IsFull(s Shape) bool { return b.tokens >= s.Burst }

// Wait is how long until b, as last refilled, holds a whole token.
func (b *Bucket) Wait(s Shape) time.Duration {
	return time.Duration(max(0, 1-b.tokens) / s.PerSecond * float64(time.Second))
}
