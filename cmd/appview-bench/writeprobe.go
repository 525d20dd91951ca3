package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/feeds"
)

// writeProbe registers a new viewer at a steady interval while the timed
// ingest runs, through the daemon's store, and times each registration:
// it is the first write of a new viewer's first read, and the wait a
// first read's writes see behind a catch-up's open batch
// (feeds/writer_wanted.go). The viewers follow no one, so nothing else
// of the workload changes; but their registrations cut the batches they
// wait on, so the run's ingest figures are not the unprobed run's.
type writeProbe struct {
	cancel context.CancelFunc
	done   sync.WaitGroup
	waits  []time.Duration
	err    error
}

// startWriteProbe registers a viewer every interval until stop.
func (b *bench) startWriteProbe(ctx context.Context, every time.Duration) *writeProbe {
	ctx, cancel := context.WithCancel(ctx)
	p := &writeProbe{cancel: cancel}
	store := b.daemon.Store()
	feed := b.cfg.Feeds[0].Name
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			viewer := syntax.DID(fmt.Sprintf("did:plc:writeprobe%014d", i))
			start := time.Now()
			// Urgent, as a getFeed request's registration is.
			if _, err := store.RegisterViewer(feeds.Urgent(ctx), viewer, feed, start); err != nil {
				if ctx.Err() == nil {
					p.err = fmt.Errorf("register probe viewer %s: %w", viewer, err)
				}
				return
			}
			p.waits = append(p.waits, time.Since(start))
		}
	}()
	return p
}

// stop ends the probe and prints what it measured.
func (p *writeProbe) stop(b *bench) error {
	p.cancel()
	p.done.Wait()
	if p.err != nil {
		return p.err
	}
	if len(p.waits) == 0 {
		fmt.Fprintln(b.out, "write probe: no registration measured")
		return nil
	}
	p50, p90, most := spread(p.waits)
	fmt.Fprintf(b.out, "write probe: %d new viewers registered during the timed ingest, each took p50 %.1f ms, p90 %.1f ms, max %.1f ms\n",
		len(p.waits), p50, p90, most)
	return nil
}

// spread gives the median, the 90th percentile and the maximum of d, in
// milliseconds; d is not empty.
func spread(d []time.Duration) (p50, p90, most float64) {
	d = slices.Clone(d)
	slices.Sort(d)
	ms := func(q float64) float64 {
		return float64(d[min(len(d)-1, int(q*float64(len(d))))].Microseconds()) / 1000
	}
	return ms(0.5), ms(0.9), float64(d[len(d)-1].Microseconds()) / 1000
}
