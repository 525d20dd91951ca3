package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/appview"
	"github.com/atfeeds/appview/directory/plctest"
	"github.com/atfeeds/appview/pds/pdstest"
	"github.com/atfeeds/appview/workload"
)

// A first-read probe asks for a new viewer's feed at a steady interval
// while the timed ingest runs, through getFeed over HTTP as an app would,
// times each answer and checks what it holds. It measures the product's
// promise under a catch-up: the first page is complete when getFeed
// answers, within backfill.first_read_wait.
//
// Its network is a fake PDS on loopback (pdstest) found through a fake PLC
// directory (plctest). Before the stream starts, firstReadPool accounts of
// the workload are put on it with firstReadPosts posts each, newer than
// the generated stream's; the stream's follows of them start followee
// backfills that find them, as on the real network. (The workload's other
// accounts are on no network, as in an unprobed run: their backfills
// fail.) Each new viewer follows firstReadFollows accounts of the pool,
// chosen at random, with its follows on the same PDS. Its first read
// lists them, or finds them listed, writing behind the catch-up's
// batches, which its writes cut short (feeds.Urgent), so the run's ingest
// figures are not an unprobed run's.
const (
	firstReadPool    = 1000
	firstReadFollows = 50
	firstReadPosts   = 5
	firstReadLimit   = 50
)

// probeNetwork is the fake PLC directory and PDS of the first-read probe.
type probeNetwork struct {
	// mu serialises addViewer: several probe clients add viewers at once.
	mu  sync.Mutex
	plc *plctest.Server
	pds *pdstest.Server
	// pool is the workload accounts on the network, and posts their posts.
	pool  []int
	posts map[int][]probePost
}

// probePost is a post on the probe's PDS. Its time (its record key's and
// its createdAt), unique among them and later than any post of the
// generated stream (dated from the workload's start), decides its place
// in a feed.
type probePost struct {
	uri string
	at  time.Time
}

// newProbeNetwork puts firstReadPool accounts of the workload's, picked
// by rng, on a new network, with their posts dated before now.
func newProbeNetwork(accounts int, rng *rand.Rand, now time.Time) *probeNetwork {
	n := &probeNetwork{plc: plctest.NewServer(), pds: pdstest.NewServer(), posts: map[int][]probePost{}}
	for _, a := range rng.Perm(accounts)[:min(accounts, firstReadPool)] {
		n.pool = append(n.pool, a)
		did := syntax.DID(workload.AccountDID(a))
		n.add(did)
		for p := range firstReadPosts {
			at := now.Add(-time.Duration(len(n.pool)*firstReadPosts+p) * time.Second)
			rkey := tidAt(at, a)
			n.pds.AddRecord(did, "app.bsky.feed.post", rkey,
				fmt.Sprintf(`{"$type":"app.bsky.feed.post","text":"from the pds","createdAt":%q}`, at.UTC().Format(time.RFC3339)))
			n.posts[a] = append(n.posts[a], probePost{uri: fmt.Sprintf("at://%s/app.bsky.feed.post/%s", did, rkey), at: at})
		}
	}
	return n
}

// configure points the daemon's directory at the fake PLC, and lets the
// DID documents aim it at the loopback PDS.
func (n *probeNetwork) configure(cfg *appview.Config) {
	cfg.Identity.PLCURL = n.plc.URL()
	cfg.Identity.HandleResolverURL = n.plc.URL()
	cfg.Identity.AllowPrivateNetworks = true
}

func (n *probeNetwork) close() {
	n.plc.Close()
	n.pds.Close()
}

// addViewer puts a new viewer on the network, following accounts of the
// pool picked by rng, and returns its DID and the URIs its first page
// should show: the newest firstReadLimit posts of the accounts it follows.
func (n *probeNetwork) addViewer(i int, rng *rand.Rand, now time.Time) (syntax.DID, map[string]bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	viewer := syntax.DID(fmt.Sprintf("did:plc:firstreadprobe%010d", i))
	n.add(viewer)
	followed := map[int]bool{}
	for k := range firstReadFollows {
		a := n.pool[rng.IntN(len(n.pool))]
		followed[a] = true
		n.pds.AddRecord(viewer, "app.bsky.graph.follow", tidAt(now, i*firstReadFollows+k),
			fmt.Sprintf(`{"$type":"app.bsky.graph.follow","subject":%q,"createdAt":%q}`, workload.AccountDID(a), now.UTC().Format(time.RFC3339)))
	}
	var all []probePost
	for a := range followed {
		all = append(all, n.posts[a]...)
	}
	slices.SortFunc(all, func(x, y probePost) int { return y.at.Compare(x.at) })
	want := map[string]bool{}
	for _, p := range all[:min(len(all), firstReadLimit)] {
		want[p.uri] = true
	}
	return viewer, want
}

func (n *probeNetwork) add(did syntax.DID) {
	n.plc.Add(did, "", n.pds.URL())
	n.pds.AddRepo(did)
}

// tidAt is a record key of time at, told apart by clock id n.
func tidAt(at time.Time, n int) syntax.RecordKey {
	return syntax.RecordKey(syntax.NewTIDFromTime(at, uint(n%1024)))
}

type firstReadProbe struct {
	stopping chan struct{}
	done     sync.WaitGroup
	mu       sync.Mutex
	answers  []firstReadAnswer
	err      error
}

type firstReadAnswer struct {
	took  time.Duration
	items int
	// complete: the page held every post it should (probeNetwork.addViewer).
	complete bool
}

// startFirstReadProbe starts clients probes, each of which reads a new
// viewer's first page at once and then every interval until stop, one at
// a time. A read under way when stop comes is waited for: every probe
// started is measured.
func (b *bench) startFirstReadProbe(ctx context.Context, every time.Duration, clients int) *firstReadProbe {
	p := &firstReadProbe{stopping: make(chan struct{})}
	httpClient := &http.Client{Timeout: b.cfg.Backfill.FirstReadWait + 30*time.Second}
	for c := range clients {
		rng := rand.New(rand.NewPCG(b.o.seed, uint64(8+c)))
		p.done.Add(1)
		go func() {
			defer p.done.Done()
			tick := time.NewTicker(every)
			defer tick.Stop()
			for i := 0; ; i++ {
				viewer, want := b.network.addViewer(i*clients+c, rng, time.Now())
				a, err := b.readFirstPage(ctx, httpClient, viewer, want)
				if !p.add(ctx, a, err, viewer) {
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-p.stopping:
					return
				case <-tick.C:
				}
			}
		}()
	}
	return p
}

// add keeps one probe's answer, or its error (the first one, unless the
// run is ending), and says whether the probe goes on.
func (p *firstReadProbe) add(ctx context.Context, a firstReadAnswer, err error, viewer syntax.DID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil && p.err == nil {
			p.err = fmt.Errorf("first page of probe viewer %s: %w", viewer, err)
		}
		return false
	}
	p.answers = append(p.answers, a)
	return true
}

// readFirstPage asks for viewer's first page, times the answer, and checks
// it holds the posts of want.
func (b *bench) readFirstPage(ctx context.Context, client *http.Client, viewer syntax.DID, want map[string]bool) (firstReadAnswer, error) {
	q := url.Values{"feed": {b.cfg.Feeds[0].Name}, "actor": {viewer.String()}, "limit": {fmt.Sprint(firstReadLimit)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.base+"/xrpc/"+b.cfg.XRPC.Namespace+".getFeed?"+q.Encode(), nil)
	if err != nil {
		return firstReadAnswer{}, err
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return firstReadAnswer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	took := time.Since(start)
	if err != nil {
		return firstReadAnswer{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return firstReadAnswer{}, fmt.Errorf("%s: %.200s", resp.Status, body)
	}
	var page struct {
		Records []struct {
			URI string `json:"uri"`
		} `json:"records"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		return firstReadAnswer{}, err
	}
	found := 0
	for _, r := range page.Records {
		if want[r.URI] {
			found++
		}
	}
	return firstReadAnswer{took: took, items: len(page.Records), complete: found == len(want)}, nil
}

// stop ends the probe and prints what it measured.
func (p *firstReadProbe) stop(b *bench) error {
	close(p.stopping)
	p.done.Wait()
	if p.err != nil {
		return p.err
	}
	if len(p.answers) == 0 {
		fmt.Fprintln(b.out, "first-read probe: no first page read")
		return nil
	}
	took := make([]time.Duration, len(p.answers))
	full, complete := 0, 0
	for i, a := range p.answers {
		took[i] = a.took
		if a.items >= firstReadLimit {
			full++
		}
		if a.complete {
			complete++
		}
	}
	p50, p90, most := spread(took)
	fmt.Fprintf(b.out, "first-read probe: %d new viewers from %d client(s) (%d follows, %d posts each on a loopback PDS) read their first page of %d during the timed ingest: %d complete (the newest posts of every account followed), %d full; answered in p50 %.1f ms, p90 %.1f ms, max %.1f ms (first_read_wait %s)\n",
		len(took), b.o.firstReadClients, firstReadFollows, firstReadPosts, firstReadLimit, complete, full, p50, p90, most, b.cfg.Backfill.FirstReadWait)
	return nil
}
