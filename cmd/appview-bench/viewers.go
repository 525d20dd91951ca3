package main

import (
	"context"
	"fmt"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// registerViewers makes every viewer of the workload a viewer of the
// default feed with its first read done, before the daemon runs, as a
// deployment whose viewers have all read once would be. The daemon's
// store is used (opened by Build, after the page slab was reserved), and
// the seed graph then stores exactly these accounts' follows. Each
// registration is the daemon's own path: register, claim the first read,
// complete it (nothing to fetch: no follows are stored yet).
func (b *bench) registerViewers(ctx context.Context) error {
	start := time.Now()
	store := b.daemon.Store()
	feed := b.cfg.Feeds[0].Name
	now := time.Now()
	for i := range b.o.viewers {
		v := syntax.DID(b.w.ViewerDID(i))
		if _, err := store.RegisterViewer(ctx, v, feed, now); err != nil {
			return fmt.Errorf("register viewer %s: %w", v, err)
		}
		if ok, err := store.ClaimFirstRead(ctx, v, feed, "bench", now, time.Hour); err != nil || !ok {
			return fmt.Errorf("claim first read of %s: %v (claimed %v)", v, err, ok)
		}
		if _, err := store.CompleteFirstRead(ctx, v, feed, "bench", now); err != nil {
			return fmt.Errorf("complete first read of %s: %w", v, err)
		}
	}
	fmt.Fprintf(b.out, "registered %d viewers of %q, first reads done, in %.1fs (index_all off)\n",
		b.o.viewers, feed, time.Since(start).Seconds())
	return nil
}
