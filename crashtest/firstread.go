package crashtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/atfeeds/appview/jetstream/jetstreamtest"
)

// firstReadConfig is the configuration of the first-read crash daemon:
// read-driven (index_all off), one feed over the world's collections, the
// world's limits, a fake PLC on loopback, and a short first-read lease, so
// that a viewer whose first read a kill cut short is taken over by the
// restarted daemon within a fraction of a second rather than two minutes.
const firstReadConfig = `feeds:
  - name: %s
    follow_collection: %s
    merge_limit: 100
    targets:
      - collection: %s
        cap: %d
identity:
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

// FirstReadHarness runs the daemon in read-driven mode against a
// PDSWorld, makes it do first reads by reading viewers' feeds, stops and
// restarts it, and checks the database after every stop.
type FirstReadHarness struct {
	World *PDSWorld
	// Jetstream is silent: every record comes from a PDS.
	Jetstream    *jetstreamtest.Server
	Bin, Dir     string
	DBPath       string
	Env          []string
	MaxStopAfter time.Duration
	Logf         func(format string, args ...any)

	// Readers is how many viewers' first reads the test keeps going at
	// once during a run: the first that are not complete, in order, so
	// that viewers complete between kills and each new one brings
	// accounts nobody fetched yet.
	Readers int

	rng     *rand.Rand
	cfgPath string
	runs    int
	// Landed counts how each run ended, by Stop.
	Landed map[Stop]int
	// MidListing counts, after each stop, the listings left between
	// pages (a stored page cursor and not complete); Resumed counts
	// listings that were and moved on in a later run.
	MidListing []int
	Resumed    int
	last       map[ListingKey]ListingRow
	poll       cursorPoller
}

// NewFirstReadHarness prepares a harness in dir; call Close when done.
func NewFirstReadHarness(w *PDSWorld, bin, dir string, seed uint64) (*FirstReadHarness, error) {
	h := &FirstReadHarness{
		World: w, Jetstream: jetstreamtest.NewServer(), Bin: bin, Dir: dir,
		DBPath: filepath.Join(dir, "appview.db"), cfgPath: filepath.Join(dir, "config.yaml"),
		MaxStopAfter: 3 * time.Second, Readers: 4, Logf: func(string, ...any) {},
		rng: rand.New(rand.NewPCG(seed, 3)), Landed: map[Stop]int{},
		last: map[ListingKey]ListingRow{},
	}
	lim := w.Config.Limits
	cfg := fmt.Sprintf(firstReadConfig, FeedName, followNSID, postNSID, lim.Cap, w.PLC.URL(), lim.Depth, lim.MaxFollows)
	if err := os.WriteFile(h.cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	return h, nil
}

// Close stops the fake Jetstream.
func (h *FirstReadHarness) Close() { h.Jetstream.Close() }

func (h *FirstReadHarness) start(extra ...string) (*Process, error) {
	env := append([]string{
		"APPVIEW_DATABASE_PATH=" + h.DBPath,
		"APPVIEW_JETSTREAM_URLS=" + h.Jetstream.URL(),
	}, h.Env...)
	h.runs++
	return StartServe(h.Bin, h.cfgPath, filepath.Join(h.Dir, fmt.Sprintf("run-%03d.log", h.runs)), append(env, extra...))
}

// Run starts the daemon (with the failpoint armed at its n-th hit, n from
// 1 to 40, for a failpoint stop), reads the feeds of the first Readers
// viewers whose first read is not complete, stops the daemon as stop says
// and checks the database.
func (h *FirstReadHarness) Run(ctx context.Context, stop Stop) error {
	var arm []string
	if _, ok := stop.failpoint(); ok {
		arm = stop.Env(1 + h.rng.IntN(40))
	}
	p, err := h.start(arm...)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	idle := make(chan struct{})
	reading := make(chan struct{})
	go func() {
		defer close(reading)
		readPending(rctx, h.DBPath, h.World.Viewers(), p, h.Readers, idle)
	}()
	landed, exit, err := EndRun(p, stop, time.Duration(h.rng.Int64N(int64(h.MaxStopAfter))), idle)
	cancel()
	<-reading
	if err != nil {
		return fmt.Errorf("%s: %w\n%s", stop, err, tail(p.Log()))
	}
	h.Landed[landed]++
	if err := h.Check(ctx); err != nil {
		return fmt.Errorf("after %s (run %d, %s): %w\n%s", stop, h.runs, exit, err, tail(p.Log()))
	}
	return nil
}

// readPending reads the feeds of the first readers of viewers whose first
// read in the database at dbPath is not complete, each again whenever the
// last read of it returned (a read returns after first_read_wait, or at
// once while the claim of a killed run holds), until ctx ends or the
// daemon exits. It closes idle when no first read is left to do.
func readPending(ctx context.Context, dbPath string, viewers []int32, p *Process, readers int, idle chan<- struct{}) {
	var wg sync.WaitGroup
	defer wg.Wait()
	var mu sync.Mutex
	inFlight := map[int32]bool{}
	closed := false
	for {
		states, err := ReadViewerStates(ctx, dbPath, FeedName)
		if err == nil {
			pending := 0
			for _, v := range viewers {
				if states[did(v)] == "complete" {
					continue
				}
				if pending++; pending > readers {
					break
				}
				mu.Lock()
				busy := inFlight[v]
				inFlight[v] = true
				mu.Unlock()
				if busy {
					continue
				}
				wg.Go(func() {
					triggerFirstRead(ctx, viewerClient(v), p.Base, did(v))
					mu.Lock()
					delete(inFlight, v)
					mu.Unlock()
				})
			}
			if pending == 0 && !closed {
				close(idle)
				closed = true
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-p.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// completeFirstReads reads the feeds of all viewers whose first read is
// not complete, at once, until every one is, for up to 2 minutes.
func completeFirstReads(ctx context.Context, dbPath string, viewers []int32, p *Process) error {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	idle := make(chan struct{})
	reading := make(chan struct{})
	go func() {
		defer close(reading)
		readPending(rctx, dbPath, viewers, p, len(viewers), idle)
	}()
	select {
	case <-idle:
	case <-rctx.Done():
	case <-p.Done():
	}
	cancel()
	<-reading
	select {
	case <-idle:
		return nil
	default:
		states, _ := ReadViewerStates(ctx, dbPath, FeedName)
		return fmt.Errorf("first reads not all complete after 2 minutes: %v\n%s", states, tail(p.Log()))
	}
}

// viewerClients are HTTP clients from distinct loopback addresses
// (127.0.0.2 and up): the daemon admits new viewers per client address,
// and viewers read from their own clients, not all from the test's one.
var viewerClients sync.Map // int32 → *http.Client

func viewerClient(v int32) *http.Client {
	if c, ok := viewerClients.Load(v); ok {
		return c.(*http.Client)
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, byte(v/250), byte(2+v%250))}}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
	c2, _ := viewerClients.LoadOrStore(v, c)
	return c2.(*http.Client)
}

// triggerFirstRead reads one page of the viewer's feed, which starts its
// first read; what it answers (an error while the daemon starts or dies,
// 429 when admission says no) does not matter: the caller reads again.
func triggerFirstRead(ctx context.Context, client *http.Client, base, viewer string) {
	q := url.Values{"feed": {FeedName}, "actor": {viewer}, "limit": {"1"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/xrpc/com.example.appview.getFeed?"+q.Encode(), nil)
	if err != nil {
		return
	}
	resp, err := client.Do(req)
	if err != nil {
		// Not listening yet, or killed: do not spin.
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
		return
	}
	resp.Body.Close()
}

// Check compares the database with the world (CheckState) and the stored
// listing cursors with those after the previous stop: none went back.
func (h *FirstReadHarness) Check(ctx context.Context) error {
	st, err := ReadFirstReadState(ctx, h.DBPath, FeedName)
	if err != nil {
		return err
	}
	m := h.World.CheckState(st)
	mid := 0
	for k, l := range st.Listings {
		if prev, ok := h.last[k]; ok && l.behind(prev) {
			m.add("listing cursor went back across a restart", "%s %s: %+v after %+v", k.DID, k.Collection, l, prev)
		}
		if prev, ok := h.last[k]; ok && !prev.Complete && prev.Page > 0 && l.Page > prev.Page {
			h.Resumed++
		}
		if !l.Complete && l.Page > 0 {
			mid++
		}
	}
	for k, prev := range h.last {
		if _, ok := st.Listings[k]; !ok {
			m.add("listing cursor lost across a restart", "%s %s: %+v", k.DID, k.Collection, prev)
		}
	}
	h.last = st.Listings
	if !m.Empty() {
		return fmt.Errorf("database differs from the PDSes:\n%s", m)
	}
	h.MidListing = append(h.MidListing, mid)
	complete, rows := 0, 0
	for d, state := range st.Viewers {
		if state == "complete" {
			complete++
			rows += len(st.Feeds[d])
		}
	}
	posts := 0
	for _, p := range st.Posts {
		posts += len(p)
	}
	h.Logf("stop %d: %d listings (%d between pages), %d posts stored; %d of %d viewers complete, %d feed rows, all equal to the PDSes",
		h.runs, len(st.Listings), mid, posts, complete, h.World.Config.Viewers, rows)
	return nil
}

// Poll reads the stored listing cursors every interval until ctx ends,
// whether the daemon runs or not, and records any that went back.
func (h *FirstReadHarness) Poll(ctx context.Context, interval time.Duration) {
	seen := map[ListingKey]ListingRow{}
	h.poll.run(ctx, interval, func() ([]string, error) {
		ls, err := ReadListings(ctx, h.DBPath)
		if err != nil {
			return nil, err
		}
		var back []string
		for k, l := range ls {
			if prev, ok := seen[k]; ok && l.behind(prev) {
				back = append(back, fmt.Sprintf("%s %s: %+v after %+v", k.DID, k.Collection, l, prev))
			}
			seen[k] = l
		}
		return back, nil
	})
}

// Polled returns how many reads Poll made and the cursors that went back.
func (h *FirstReadHarness) Polled() (int, []string) { return h.poll.polled() }

// Finish reads every viewer's feed in a daemon left alone until every
// first read is complete, checks the database, then compares every
// viewer's whole feed, read through getFeed page by page, with the
// expected one, and stops the daemon with SIGTERM.
func (h *FirstReadHarness) Finish(ctx context.Context) error {
	p, err := h.start()
	if err != nil {
		return err
	}
	defer p.Signal(syscall.SIGKILL)
	if err := completeFirstReads(ctx, h.DBPath, h.World.Viewers(), p); err != nil {
		return err
	}
	if err := h.Check(ctx); err != nil {
		return err
	}
	viewers := h.World.Viewers()
	m, pages, err := h.compareGetFeed(ctx, p.Base, viewers)
	if err != nil {
		return err
	}
	if !m.Empty() {
		return fmt.Errorf("getFeed differs from the PDSes:\n%s", m)
	}
	h.Logf("getFeed: %d viewers, %d pages, all equal to the feeds computed from the PDSes", len(viewers), pages)
	if err := stopCleanly(p); err != nil {
		return err
	}
	return h.Check(ctx)
}

func (h *FirstReadHarness) compareGetFeed(ctx context.Context, base string, viewers []int32) (*Mismatches, int, error) {
	out := newMismatches()
	client := &http.Client{Timeout: 30 * time.Second}
	pages := 0
	for _, v := range viewers {
		items, n, err := readFeed(ctx, client, base, did(v))
		pages += n
		if err != nil {
			return nil, pages, err
		}
		h.World.checkServed(v, items, out)
	}
	return out, pages, nil
}
