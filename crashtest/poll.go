package crashtest

import (
	"context"
	"sync"
	"time"
)

// cursorPoller reads stored cursors every interval, while the daemon runs
// and while it is down, and keeps every read that found one gone back.
type cursorPoller struct {
	mu   sync.Mutex
	n    int
	back []string
}

// run calls read every interval until ctx ends. read compares what it
// finds with what it found before and returns what went back; an error is
// a read racing a start or a kill, not counted: the next one counts.
func (p *cursorPoller) run(ctx context.Context, interval time.Duration, read func() ([]string, error)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
		back, err := read()
		if err != nil {
			continue
		}
		p.mu.Lock()
		p.n++
		p.back = append(p.back, back...)
		p.mu.Unlock()
	}
}

// polled returns how many reads counted and what went back.
func (p *cursorPoller) polled() (int, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n, append([]string(nil), p.back...)
}
