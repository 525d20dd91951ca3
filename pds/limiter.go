package pds

import (
	"context"
	"sync"
)

// Limiter bounds PDS requests in flight, overall and per host, so one slow
// or huge PDS cannot take every slot. The first-read backfill and the
// profile fetcher each keep their own.
type Limiter struct {
	global  chan struct{}
	perHost int

	mu    sync.Mutex
	hosts map[string]*hostSlots
}

type hostSlots struct {
	slots chan struct{}
	users int
}

// NewLimiter allows global requests at once, at most perHost of them to
// one host.
func NewLimiter(global, perHost int) *Limiter {
	return &Limiter{global: make(chan struct{}, global), perHost: perHost, hosts: map[string]*hostSlots{}}
}

// Acquire waits for a global and a host slot; release gives both back.
func (l *Limiter) Acquire(ctx context.Context, host string) (release func(), err error) {
	h, leave := l.use(host)
	select {
	case h.slots <- struct{}{}:
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
	select {
	case l.global <- struct{}{}:
	case <-ctx.Done():
		<-h.slots
		leave()
		return nil, ctx.Err()
	}
	return l.releaser(h, leave), nil
}

// TryAcquire takes a global and a host slot if both are free now, without
// waiting; ok is false, and nothing is held, otherwise.
func (l *Limiter) TryAcquire(host string) (release func(), ok bool) {
	h, leave := l.use(host)
	select {
	case h.slots <- struct{}{}:
	default:
		leave()
		return nil, false
	}
	select {
	case l.global <- struct{}{}:
	default:
		<-h.slots
		leave()
		return nil, false
	}
	return l.releaser(h, leave), true
}

// use counts one more user of host's slots, making them if needed;
// leave forgets the host's slots once no one uses them.
func (l *Limiter) use(host string) (h *hostSlots, leave func()) {
	l.mu.Lock()
	h = l.hosts[host]
	if h == nil {
		h = &hostSlots{slots: make(chan struct{}, l.perHost)}
		l.hosts[host] = h
	}
	h.users++
	l.mu.Unlock()
	return h, func() {
		l.mu.Lock()
		if h.users--; h.users == 0 {
			delete(l.hosts, host)
		}
		l.mu.Unlock()
	}
}

// releaser gives a held global and host slot back.
func (l *Limiter) releaser(h *hostSlots, leave func()) func() {
	return func() {
		<-l.global
		<-h.slots
		leave()
	}
}
