// Package testclock is the settable clock tests inject where the code
// takes a func() time.Time, so time is driven explicitly, never slept.
package testclock

import (
	"sync"
	"time"
)

// Clock is safe for concurrent use: the code under test reads it from its
// own goroutines while the test moves it.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a clock stopped at start.
func New(start time.Time) *Clock { return &Clock{now: start} }

// Now is the clock's time; pass the method value as the code's clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
