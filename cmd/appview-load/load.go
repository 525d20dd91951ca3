package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/jetstream/jetstreamtest"
)

// measure warms the existing viewers up, then alternates unloaded and
// loaded phases (rounds of each, so that drift in a shared machine hits
// both alike) with ingest running throughout.
func (w *world) measure(ctx context.Context) (*report, error) {
	if err := w.warmUp(ctx); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	prof, err := newProfiler(w.o.profile)
	if err != nil {
		return nil, err
	}
	rep := &report{cpuOf: "daemon"}
	if !w.o.separate {
		rep.cpuOf = "process"
	}
	burst := newBurst(w)
	feedCtx, stopFeed := context.WithCancel(ctx)
	var feeder sync.WaitGroup
	feeder.Add(1)
	feedStart := time.Now()
	go func() {
		defer feeder.Done()
		rep.events, rep.lastTimeUS = w.feed(feedCtx)
	}()

	var unloaded, loaded samples
	err = func() error {
		for range w.o.rounds {
			s, err := w.phase(ctx, nil)
			if err != nil {
				return err
			}
			unloaded.add(s)
			prof.start()
			s, err = w.phase(ctx, burst)
			prof.stop()
			if err != nil {
				return err
			}
			loaded.add(s)
		}
		return prof.write()
	}()
	stopFeed()
	feeder.Wait()
	if err != nil {
		return nil, err
	}
	rep.feedSeconds = time.Since(feedStart).Seconds()
	rep.unloaded, rep.loaded = unloaded.stats(), loaded.stats()
	rep.burst = burst.result()

	// Once the feed stops, everything sent is applied within moments.
	start := time.Now()
	for w.daemon.cursorUS() < rep.lastTimeUS {
		if time.Since(start) > 30*time.Second {
			return nil, fmt.Errorf("ingest did not catch up within 30s of the end of the feed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	rep.catchUp = time.Since(start)
	rep.peakRSS, rep.daemonRSS = peakRSSOf("self"), w.daemon.peakRSS()
	return rep, nil
}

// feed appends posts by random accounts to the fake Jetstream at the
// configured rate, stamped with the wall clock, until ctx ends.
func (w *world) feed(ctx context.Context) (events int, lastTimeUS int64) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	rng := rand.New(rand.NewPCG(w.o.seed, 0xfeed))
	start := time.Now()
	var frames [][]byte
	for {
		select {
		case <-ctx.Done():
			return events, lastTimeUS
		case <-t.C:
		}
		// As many as are due by now, so a late tick does not lower the rate.
		due := int(time.Since(start).Seconds()*float64(w.o.rate)) - events
		frames = frames[:0]
		for range due {
			ts := max(time.Now().UnixMicro(), lastTimeUS+1)
			lastTimeUS = ts
			author := w.accounts[rng.IntN(len(w.accounts))]
			rkey := syntax.NewTIDFromTime(time.UnixMicro(ts), uint(rng.IntN(1024)))
			frames = append(frames, jetstreamtest.Post(string(author), string(rkey), ts, "live"))
		}
		w.js.Append(frames...)
		events += due
	}
}

// samples are what the existing viewers saw in one or more phases.
type samples struct {
	reads, failed int
	took, lags    []time.Duration
	// cpu is the daemon process's CPU time over wall time.
	cpu, wall time.Duration
}

func (s *samples) add(o samples) {
	s.reads += o.reads
	s.failed += o.failed
	s.cpu += o.cpu
	s.wall += o.wall
	s.took = append(s.took, o.took...)
	s.lags = append(s.lags, o.lags...)
}

func (s *samples) stats() phaseStats {
	st := phaseStats{reads: s.reads, failed: s.failed}
	if s.wall > 0 {
		st.cores = s.cpu.Seconds() / s.wall.Seconds()
	}
	st.p50, st.p99, st.max = percentiles(s.took)
	st.lagP50, _, st.lagMax = percentiles(s.lags)
	return st
}

// phase reads existing viewers' feeds for the phase length, with the
// burst running alongside when it is set, and samples the ingest lag.
//
// The phase ends new requests; those in flight are waited for (up to the
// clients' timeout), so that a slow answer counts instead of vanishing.
func (w *world) phase(reqCtx context.Context, b *burst) (samples, error) {
	ctx, cancel := context.WithTimeout(reqCtx, w.o.phase)
	defer cancel()
	var (
		wg sync.WaitGroup
		mu sync.Mutex
		s  samples
	)
	cpu0, wall0 := w.daemon.cpuTime(), time.Now()
	if b != nil {
		for i := range w.o.clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b.run(ctx, reqCtx, i)
			}()
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if c := w.daemon.cursorUS(); c > 0 {
					mu.Lock()
					s.lags = append(s.lags, time.Since(time.UnixMicro(c)))
					mu.Unlock()
				}
			}
		}
	}()

	// Existing viewers read from their own address, paced so that the
	// readers measure latency rather than saturate the machine.
	client := newClient(net.IPv4(127, 0, 0, 2), w.o.readers)
	interval := time.Duration(w.o.readers) * time.Second / time.Duration(w.o.readRate)
	for r := range w.o.readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(w.o.seed, uint64(r)))
			t := time.NewTicker(interval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				a, err := getFeed(reqCtx, client, w.base, w.viewers[rng.IntN(len(w.viewers))])
				mu.Lock()
				s.reads++
				if err != nil || a.status != http.StatusOK || a.records == 0 {
					s.failed++
				} else {
					s.took = append(s.took, a.took)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	s.cpu, s.wall = w.daemon.cpuTime()-cpu0, time.Since(wall0)
	if s.reads == 0 {
		return s, fmt.Errorf("no reads in a phase of %s", w.o.phase)
	}
	return s, nil
}

// burst sends first reads for new unknown actors from several clients,
// each paced at burstRate with at most burstConc in flight, ignoring
// Retry-After as a hostile client would.
type burst struct {
	w       *world
	clients []*http.Client
	actors  *newcomers

	mu           sync.Mutex
	statuses     map[int]int
	errors       int
	noRetryAfter int
	dropped      int // ticks skipped because burstConc were in flight
	took         []time.Duration
}

func newBurst(w *world) *burst {
	// Enough for every client's bucket and every request in flight; more
	// are made as needed.
	b := &burst{w: w, statuses: map[int]int{}, actors: newNewcomers(w, w.o.clients*(w.o.burstConc+16))}
	for i := range w.o.clients {
		b.clients = append(b.clients, newClient(net.IPv4(127, 0, 0, byte(10+i)), w.o.burstConc))
	}
	return b
}

// run sends requests until ctx ends; they run under reqCtx, and run
// returns once they are all answered.
func (b *burst) run(ctx, reqCtx context.Context, client int) {
	c := b.clients[client]
	sem := make(chan struct{}, b.w.o.burstConc)
	t := time.NewTicker(time.Second / time.Duration(b.w.o.burstRate))
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		select {
		case sem <- struct{}{}:
		default:
			b.mu.Lock()
			b.dropped++
			b.mu.Unlock()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			actor := b.actors.get()
			a, err := getFeed(reqCtx, c, b.w.base, actor)
			if err == nil && (a.status == http.StatusTooManyRequests || a.status == http.StatusServiceUnavailable) {
				b.actors.put(actor)
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			if err != nil {
				b.errors++
				return
			}
			b.statuses[a.status]++
			b.took = append(b.took, a.took)
			if (a.status == http.StatusTooManyRequests || a.status == http.StatusServiceUnavailable) && a.retryAfter == "" {
				b.noRetryAfter++
			}
		}()
	}
}

func (b *burst) result() burstStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := burstStats{statuses: b.statuses, errors: b.errors, noRetryAfter: b.noRetryAfter, dropped: b.dropped}
	for _, n := range b.statuses {
		s.requests += n
	}
	s.p50, s.p99, _ = percentiles(b.took)
	return s
}

func countRecords(body []byte) int {
	var page struct {
		Records []json.RawMessage `json:"records"`
	}
	if json.Unmarshal(body, &page) != nil {
		return 0
	}
	return len(page.Records)
}
