package replay

import (
	"context"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"github.com/atfeeds/appview/workload"
)

// Log plays a frame log.
func Log(r io.Reader) Source { return &logSource{r: workload.NewLogReader(r)} }

type logSource struct{ r *workload.LogReader }

func (l *logSource) Next(context.Context) (workload.Frame, error) { return l.r.Next() }

// Stream plays n frames of a live generator (n < 0: forever).
func Stream(s *workload.Stream, n int) Source { return &streamSource{s: s, left: n} }

type streamSource struct {
	s    *workload.Stream
	left int
}

func (g *streamSource) Next(context.Context) (workload.Frame, error) {
	if g.left == 0 {
		return workload.Frame{}, io.EOF
	}
	if g.left > 0 {
		g.left--
	}
	return g.s.Next(), nil
}

// After drops the frames of src up to the first one past timeUS, so a
// stream resumed on a database that already holds them starts where it
// left off instead of spending its pace on frames the consumer would
// skip. From there on every frame passes, re-sends of older ones included.
func After(src Source, timeUS int64) Source { return &after{src: src, timeUS: timeUS} }

type after struct {
	src    Source
	timeUS int64
	passed bool
}

func (a *after) Next(ctx context.Context) (workload.Frame, error) {
	for {
		f, err := a.src.Next(ctx)
		if err != nil || a.passed || f.TimeUS > a.timeUS {
			a.passed = a.passed || err == nil
			return f, err
		}
	}
}

// Throttle paces src to perSecond frames a second from the first call. A
// reader that falls behind catches up by at most maxBurst worth of frames
// (timer and scheduling jitter), not in a burst after a long stall.
// perSecond must be a ValidRate.
func Throttle(src Source, perSecond float64) Source {
	if !ValidRate(perSecond) {
		panic(fmt.Sprintf("replay.Throttle: rate %v: want a finite positive rate of at least one frame in 292 years", perSecond))
	}
	return &throttle{src: src, interval: time.Duration(float64(time.Second) / perSecond)}
}

// ValidRate reports whether Throttle can pace frames at perSecond: finite,
// positive, and with an interval between frames a time.Duration holds.
func ValidRate(perSecond float64) bool {
	return perSecond > 0 && !math.IsInf(perSecond, 1) && float64(time.Second)/perSecond < math.MaxInt64
}

const maxBurst = 100 * time.Millisecond

type throttle struct {
	src      Source
	interval time.Duration
	next     time.Time
}

func (t *throttle) Next(ctx context.Context) (workload.Frame, error) {
	now := time.Now()
	if t.next.IsZero() || t.next.Before(now.Add(-maxBurst)) {
		t.next = now
	}
	if wait := t.next.Sub(now); wait > 0 {
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return workload.Frame{}, ctx.Err()
		case <-timer.C:
		}
	}
	t.next = t.next.Add(t.interval)
	return t.src.Next(ctx)
}

// Playlist plays sources one after another. When the last one is
// exhausted it waits for Add, so a benchmark can hold the next part of a
// stream back until the previous one is applied.
type Playlist struct {
	mu      sync.Mutex
	queue   []Source
	added   chan struct{} // closed and replaced on Add
	current Source
}

// NewPlaylist returns a playlist of srcs.
func NewPlaylist(srcs ...Source) *Playlist {
	return &Playlist{queue: srcs, added: make(chan struct{})}
}

// Add queues src after the others.
func (p *Playlist) Add(src Source) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queue = append(p.queue, src)
	close(p.added)
	p.added = make(chan struct{})
}

// Next returns the next frame of the current source, moving on to the
// next source when it is exhausted. It never returns io.EOF: an empty
// playlist waits.
func (p *Playlist) Next(ctx context.Context) (workload.Frame, error) {
	for {
		if p.current != nil {
			f, err := p.current.Next(ctx)
			if err != io.EOF {
				return f, err
			}
			p.current = nil
		}
		p.mu.Lock()
		if len(p.queue) > 0 {
			p.current = p.queue[0]
			p.queue = p.queue[1:]
			p.mu.Unlock()
			continue
		}
		added := p.added
		p.mu.Unlock()
		select {
		case <-added:
		case <-ctx.Done():
			return workload.Frame{}, ctx.Err()
		}
	}
}
