package crashtest

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"
)

// catchUpReadConfig is the configuration of the catch-up crash daemon:
// read-driven, the feed of ConfigYAML (cap and merge limit above anything
// a crash log holds), the world's PLC, first-read bounds above what any
// repo holds (so a viewer's feed is every live post of every account it
// follows) and a short first-read lease, as in firstReadConfig.
const catchUpReadConfig = ConfigYAML + `identity:
  plc_url: %s
  allow_private_networks: true
backfill:
  first_read_wait: 2s
  first_read_lease: 200ms
  depth: %d
  max_follows: %d
ingest:
  index_all: false
`

// CatchUpReadHarness runs the daemon in read-driven mode against a fake
// Jetstream and the LogWorld of its log. Every run starts behind a
// backlog, so the daemon applies a catch-up's batch in parts, and reads
// viewers' feeds, so their first reads (urgent writers) cut those batches
// (feeds/writer_wanted.go). A run ends with a kill; the next starts on the
// same database. It is a Harness with its own runs and checks: mid-log
// the database cannot be compared with the model at the cursor, as
// listings show records ahead of the stream.
type CatchUpReadHarness struct {
	*Harness
	World *LogWorld
	// Readers is how many viewers' first reads a run keeps going at once.
	Readers int
}

// NewCatchUpReadHarness prepares a harness in dir; call Close when done.
func NewCatchUpReadHarness(l *Log, w *LogWorld, bin, dir string, seed uint64) (*CatchUpReadHarness, error) {
	base, err := NewHarness(l, bin, dir, seed)
	if err != nil {
		return nil, err
	}
	base.readDriven, base.MaxStopAfter = true, 2*time.Second
	cfg := fmt.Sprintf(catchUpReadConfig, w.PLC.URL(), max(w.MostPosts, 1), max(w.MostFollows, 1))
	if err := os.WriteFile(base.cfgPath, []byte(cfg), 0o644); err != nil {
		base.Close()
		return nil, err
	}
	return &CatchUpReadHarness{Harness: base, World: w, Readers: 4}, nil
}

// viewers are the accounts whose feeds the test reads: the log's viewers
// and a few accounts that follow nobody (empty feeds).
func (h *CatchUpReadHarness) viewers() []int32 {
	cfg := h.Log.Workload.Config()
	out := make([]int32, 0, cfg.Viewers+5)
	for v := range cfg.Viewers {
		out = append(out, int32(v))
	}
	for i := range 5 {
		out = append(out, int32(cfg.Viewers+i*(cfg.Accounts-cfg.Viewers)/5))
	}
	return out
}

// First streams the seed graph into a daemon on an empty database (nobody
// reads yet, so all of it is out of scope), waits until its cursor is
// committed and kills the daemon: the backlogs of the later runs need a
// stored cursor.
func (h *CatchUpReadHarness) First(ctx context.Context) error {
	p, err := h.firstCommit(ctx)
	if err != nil {
		return err
	}
	p.Signal(syscall.SIGKILL)
	if _, err := p.Wait(10 * time.Second); err != nil {
		return err
	}
	return h.Check(ctx)
}

// Run starts the daemon (with the failpoint armed at its first hit, for a
// failpoint stop), reads the feeds of the first Readers
// of the first readUpTo viewers whose first read is not complete, appends
// the log's frames up to index upTo at once, stops the daemon as stop
// says and checks the database. The frames are appended once a first
// read is listing (its pages are urgent writes), and are a backlog the
// daemon applies as a catch-up's batch in parts (a part is up to 8,192
// events, so more than that), which those writes cut.
func (h *CatchUpReadHarness) Run(ctx context.Context, stop Stop, upTo, readUpTo int) error {
	var arm []string
	if _, ok := stop.failpoint(); ok {
		arm = stop.Env(1)
	}
	began := time.Now()
	p, err := h.start(arm...)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	reading := make(chan struct{})
	go func() {
		defer close(reading)
		readPending(rctx, h.DBPath, h.viewers()[:readUpTo], p, h.Readers, make(chan struct{}))
	}()
	// done is closed once the stored cursor covers the appended frames
	// (the catch-up is applied: no part is left for a first read to cut)
	// and two seconds have passed since the append (time for a listing
	// page): a failpoint not hit by then will not be (EndRun's idle). A
	// slow machine takes longer to apply the backlog, and the window
	// grows with it.
	done := make(chan struct{})
	paced := make(chan struct{})
	go func() {
		defer close(paced)
		defer close(done)
		listed := h.World.requests()
		// A run that ended sooner (a kill, a failpoint hit before any
		// listing) still appends: the frames are the next run's backlog.
		if !waitFor(rctx, 3*time.Second, func() bool { return h.World.requests() > listed }) && rctx.Err() == nil {
			h.Logf("run %d: no PDS request within 3 s of the start; appending anyway", h.runs)
		}
		from := h.appended
		h.appendUpTo(upTo)
		appended := time.Now()
		h.Logf("run %d: %d frames appended %s after the start, %d PDS requests before", h.runs, h.appended-from, time.Since(began).Round(time.Millisecond), h.World.requests()-listed)
		// An error is the daemon gone (at the failpoint) or the run over.
		if WaitCursor(rctx, h.DBPath, p, h.Log.LastTimeUS(upTo)) == nil {
			h.Logf("run %d: the backlog applied %s after the append", h.runs, time.Since(appended).Round(time.Millisecond))
		}
		sleep(rctx, time.Until(appended.Add(2*time.Second)))
	}()
	landed, exit, err := EndRun(p, stop, time.Duration(h.rng.Int64N(int64(h.MaxStopAfter))), done)
	cancel()
	<-reading
	<-paced
	h.Logf("run %d: %s after %s", h.runs, landed, time.Since(began).Round(time.Millisecond))
	if err != nil {
		return fmt.Errorf("%s: %w\n%s", stop, err, tail(p.Log()))
	}
	h.Landed[landed]++
	if err := h.Check(ctx); err != nil {
		return fmt.Errorf("after %s (run %d, %s): %w\n%s", stop, h.runs, exit, err, tail(p.Log()))
	}
	return nil
}

// sleep waits d or until ctx ends, and says whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// waitFor polls cond every 10 ms until it holds, ctx ends or limit
// passes, and says whether it held.
func waitFor(ctx context.Context, limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for {
		if cond() {
			return true
		}
		if !time.Now().Before(deadline) || !sleep(ctx, 10*time.Millisecond) {
			return false
		}
	}
}

// Check reads the database with the daemon stopped. The stored cursor
// must not have gone back. Mid-log the feeds cannot be compared with a
// model: listings show records ahead of the replay. But no feed row may
// be an orphan, a duplicate, a post the log never made, or at a position
// other than the one the post's creation gave it.
func (h *CatchUpReadHarness) Check(ctx context.Context) error {
	st, err := ReadState(ctx, h.DBPath, h.World.Final.accounts)
	if err != nil {
		return err
	}
	if n := len(h.Cursors); n > 0 && st.CursorUS < h.Cursors[n-1] {
		return fmt.Errorf("the stored cursor went back from %d to %d", h.Cursors[n-1], st.CursorUS)
	}
	h.Cursors = append(h.Cursors, st.CursorUS)
	out := newMismatches()
	if st.Orphans > 0 {
		out.add("feed row of a missing record", "%d rows", st.Orphans)
	}
	rows := 0
	for v, feed := range st.Feeds {
		seen := make(map[key]bool, len(feed))
		for _, r := range feed {
			k := key{r.author, r.rkey}
			p := h.World.Final.post(r.author, r.rkey)
			switch {
			case seen[k]:
				out.add("feed item duplicated", "viewer %s: %s/%s", did(v), did(r.author), r.rkey)
			case p == nil:
				out.add("feed item from nowhere", "viewer %s: %s/%s", did(v), did(r.author), r.rkey)
			case r.sortUS != p.sortUS:
				out.add("feed item out of place", "viewer %s: %s/%s at %d, want %d", did(v), did(r.author), r.rkey, r.sortUS, p.sortUS)
			}
			seen[k] = true
		}
		rows += len(feed)
	}
	if !out.Empty() {
		return fmt.Errorf("database at cursor %d:\n%s", st.CursorUS, out)
	}
	h.Logf("stop %d: cursor %d; %d viewers with feed rows, %d rows, none misplaced", len(h.Cursors), st.CursorUS, len(st.Feeds), rows)
	return nil
}

// Finish streams the rest of the log into a run left alone, reads every
// viewer's feed until every first read is complete, waits until the
// stored cursor covers the log and every viewer's feed rows are the whole
// log's (a followee's backfill, which no request waits on, may still be
// listing), compares every feed read through getFeed page by page, and
// stops the daemon with SIGTERM.
func (h *CatchUpReadHarness) Finish(ctx context.Context) error {
	p, err := h.start()
	if err != nil {
		return err
	}
	defer p.Signal(syscall.SIGKILL)
	h.appendUpTo(len(h.Log.Frames))
	viewers := h.viewers()
	if err := completeFirstReads(ctx, h.DBPath, viewers, p); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := WaitCursor(wctx, h.DBPath, p, h.Log.EndUS); err != nil {
		return fmt.Errorf("%w\n%s", err, tail(p.Log()))
	}
	var m *Mismatches
	for {
		st, err := ReadState(ctx, h.DBPath, h.World.Final.accounts)
		if err != nil {
			return err
		}
		m = newMismatches()
		for _, v := range viewers {
			compareFeed(h.World.Final, v, h.World.Final.Feed(v), st.Feeds[v], m)
		}
		if m.Empty() {
			h.Logf("every viewer's feed rows equal to the whole log's (%d viewers, %d feed rows)", len(viewers), feedRows(st))
			break
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("feeds after the whole log differ from it:\n%s\n%s", m, tail(p.Log()))
		case <-p.Done():
			return fmt.Errorf("the daemon exited (%s)\n%s", p.exit(), tail(p.Log()))
		case <-time.After(200 * time.Millisecond):
		}
	}
	m, pages, err := compareGetFeed(ctx, p.Base, h.World.Final, viewers, false)
	if err != nil {
		return err
	}
	if !m.Empty() {
		return fmt.Errorf("getFeed differs from the log:\n%s", m)
	}
	h.Logf("getFeed: %d viewers, %d pages, all equal to the model", len(viewers), pages)
	if err := stopCleanly(p); err != nil {
		return err
	}
	return h.Check(ctx)
}
