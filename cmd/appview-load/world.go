package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/appview"
	"github.com/atfeeds/appview/directory/plctest"
	"github.com/atfeeds/appview/jetstream/jetstreamtest"
	"github.com/atfeeds/appview/pds/pdstest"
)

const (
	followNSID  = syntax.NSID("app.bsky.graph.follow")
	postNSID    = syntax.NSID("app.bsky.feed.post")
	getFeedPath = "/xrpc/com.example.appview.getFeed"
)

// world is the fake network and the daemon under load.
type world struct {
	o      options
	plc    *plctest.Server
	pds    *pdstest.Server
	js     *jetstreamtest.Server
	daemon daemon
	base   string // the daemon's base URL
	tmp    string // removed at close, when we made it

	mu  sync.Mutex
	rng *rand.Rand // the follow graph
	// accounts post; viewers read; newcomers are made as the burst asks.
	accounts []syntax.DID
	viewers  []syntax.DID
}

func newWorld(ctx context.Context, o options) (_ *world, err error) {
	w := &world{
		o:   o,
		plc: plctest.NewServer(), pds: pdstest.NewServer(), js: jetstreamtest.NewServer(),
		rng: rand.New(rand.NewPCG(o.seed, 0x10ad)),
	}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	dir := o.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "appview-load-"); err != nil {
			return nil, err
		}
		w.tmp = dir
	}

	// Accounts with a backlog of posts, an hour old at most.
	start := time.Now().Add(-time.Hour)
	for i := range o.accounts {
		did := syntax.DID(fmt.Sprintf("did:plc:account%06d", i))
		w.plc.Add(did, "", w.pds.URL())
		for j := range o.posts {
			at := start.Add(time.Duration(j*o.accounts+i) * time.Hour / time.Duration(o.posts*o.accounts))
			w.pds.AddRecord(did, postNSID, syntax.RecordKey(syntax.NewTIDFromTime(at, 0)),
				fmt.Sprintf(`{"$type":"app.bsky.feed.post","text":"backlog %d","createdAt":%q}`, j, at.UTC().Format(time.RFC3339Nano)))
		}
		w.accounts = append(w.accounts, did)
	}
	for i := range o.viewers {
		did := syntax.DID(fmt.Sprintf("did:plc:viewer%06d", i))
		w.addActor(did)
		w.viewers = append(w.viewers, did)
	}

	cfg := appview.DefaultConfig()
	cfg.Database.Path = dir + "/appview.db"
	cfg.Jetstream.URLs = []string{w.js.URL()}
	cfg.Identity.PLCURL = w.plc.URL()
	cfg.Identity.HandleResolverURL = w.plc.URL()
	cfg.Identity.AllowPrivateNetworks = true // the fakes are on loopback
	cfg.Ingest.IndexAll = false
	if o.maxRunning > 0 {
		cfg.Backfill.Admission.MaxRunning = o.maxRunning
	}
	if o.maxQueued != nil {
		cfg.Backfill.Admission.MaxQueued = *o.maxQueued
	}
	if o.firstReadWait > 0 {
		cfg.Backfill.FirstReadWait = o.firstReadWait
	}
	if o.separate {
		w.daemon, err = startChild(ctx, cfg, dir, o.verbose)
	} else {
		w.daemon, err = startInProcess(ctx, cfg, daemonLogger(o.verbose))
	}
	if err != nil {
		return nil, err
	}
	w.base = w.daemon.baseURL()
	if !w.js.WaitConnections(1, 10*time.Second) {
		return nil, errors.New("the daemon did not subscribe to the fake Jetstream within 10s")
	}
	return w, nil
}

// addActor registers did on the PLC with a document naming the PDS, and
// gives it follows of random accounts there.
func (w *world) addActor(did syntax.DID) {
	w.plc.Add(did, "", w.pds.URL())
	w.mu.Lock()
	picks := w.rng.Perm(len(w.accounts))[:w.o.follows]
	w.mu.Unlock()
	for k, a := range picks {
		w.pds.AddRecord(did, followNSID, syntax.RecordKey(syntax.NewTIDFromInteger(uint64(k+1)<<10)),
			fmt.Sprintf(`{"$type":"app.bsky.graph.follow","subject":%q,"createdAt":"2026-01-01T00:00:00Z"}`, w.accounts[a]))
	}
}

// warmUp runs the first read of every existing viewer, spread over
// enough loopback addresses (127.0.1.x) that no per-client bucket runs
// dry, and checks each feed came back full.
func (w *world) warmUp(ctx context.Context) error {
	const perAddress = 5 // well inside a bucket of 10
	clients := map[int]*http.Client{}
	for i := range (len(w.viewers) + perAddress - 1) / perAddress {
		clients[i] = newClient(net.IPv4(127, 0, 1, byte(1+i%250)), 8)
	}
	sem := make(chan struct{}, 8)
	errs := make(chan error, len(w.viewers))
	var wg sync.WaitGroup
	for i, v := range w.viewers {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			// A first read that waited in the queue past first_read_wait
			// answers an empty page and goes on: read again until it is
			// done (these reads are no longer first reads).
			deadline := time.Now().Add(30 * time.Second)
			for {
				res, err := getFeed(ctx, clients[i/perAddress], w.base, v)
				switch {
				case err != nil:
					errs <- err
				case res.status != http.StatusOK:
					errs <- fmt.Errorf("first read of %s: status %d", v, res.status)
				case res.records == 0 && time.Now().After(deadline):
					errs <- fmt.Errorf("first read of %s: feed still empty after 30s", v)
				case res.records == 0:
					time.Sleep(50 * time.Millisecond)
					continue
				}
				return
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func (w *world) close() {
	if w.daemon != nil {
		w.daemon.close()
	}
	w.js.Close()
	w.pds.Close()
	w.plc.Close()
	if w.tmp != "" {
		os.RemoveAll(w.tmp)
	}
}

// newClient is an HTTP client whose connections come from local, so the
// daemon sees each simulated client at its own address.
func newClient(local net.IP, conns int) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: local}, Timeout: 5 * time.Second}
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			DialContext:         d.DialContext,
			MaxConnsPerHost:     conns,
			MaxIdleConnsPerHost: conns,
		},
	}
}

type feedAnswer struct {
	status     int
	retryAfter string
	records    int
	took       time.Duration
}

// getFeed reads the first page of actor's feed.
func getFeed(ctx context.Context, c *http.Client, base string, actor syntax.DID) (feedAnswer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+getFeedPath+"?feed=following&limit=50&actor="+string(actor), nil)
	if err != nil {
		return feedAnswer{}, err
	}
	start := time.Now()
	res, err := c.Do(req)
	if err != nil {
		return feedAnswer{}, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	a := feedAnswer{status: res.StatusCode, retryAfter: res.Header.Get("Retry-After"), took: time.Since(start)}
	if err != nil {
		return a, err
	}
	if a.status == http.StatusOK {
		a.records = countRecords(body)
	}
	return a, nil
}
