package appview

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/atfeeds/appview/feeds"
)

// GET /status answers from two sources. What is cheap is read per request:
// the committed Jetstream cursor (in memory) and its lag, the last sync
// runs (an index walk of ten rows), the last gap. What needs a whole-table
// count (viewers and items per feed, follows, targets, backfill states and
// failures, the sweep) comes from a snapshot that a background goroutine
// recomputes on demand: a request that finds the snapshot older than
// statusCountsEvery asks for a new one and is answered with the one it has,
// "counts_as_of" saying how old. So a request never scans a table, the
// counts cost nothing while nobody reads the page, and a polling monitor
// causes at most one recount per statusCountsEvery. A recount that takes
// long (a big database) stretches the interval to ten times its duration,
// so counting never takes more than a tenth of one read connection.
const (
	statusCountsEvery = 30 * time.Second
	// statusFirstWait is how long a request waits for the very first
	// snapshot before it answers without counts.
	statusFirstWait = 2 * time.Second
	// statusSyncRuns is how many recent sync runs the page lists.
	statusSyncRuns = 10
	// statusRecountTimeout bounds one recount.
	statusRecountTimeout = 5 * time.Minute
)

// statusPage builds the /status answer (the xrpc.Config Status hook) and
// runs the recount goroutine (Run).
type statusPage struct {
	store   *feeds.Store
	version string
	log     *slog.Logger
	now     func() time.Time

	kick  chan struct{} // a request wants a fresher snapshot
	first chan struct{} // closed when the first recount ended

	mu   sync.Mutex
	snap *statusCounts // nil until the first recount succeeded
	// lastTry and lastErr describe the last recount, successful or not.
	lastTry   time.Time
	lastTook  time.Duration
	lastErr   error
	firstOnce sync.Once
}

// statusCounts is one recount.
type statusCounts struct {
	at     time.Time
	took   time.Duration
	counts feeds.Counts
}

func newStatusPage(store *feeds.Store, version string, log *slog.Logger, now func() time.Time) *statusPage {
	return &statusPage{
		store: store, version: version, log: log.With("component", "status"), now: now,
		kick: make(chan struct{}, 1), first: make(chan struct{}),
	}
}

// Run recounts when a request asks and the snapshot is due, until ctx ends.
func (p *statusPage) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.kick:
		}
		if !p.due() {
			continue
		}
		p.recount(ctx)
	}
}

// due reports whether a recount may run now: none ran yet, or the last
// one is older than its interval (statusCountsEvery, or ten times its
// duration if longer), failures included, so a failing count is not
// retried in a loop.
func (p *statusPage) due() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lastTry.IsZero() {
		return true
	}
	return p.now().Sub(p.lastTry) >= max(statusCountsEvery, 10*p.lastTook)
}

func (p *statusPage) recount(ctx context.Context) {
	defer p.firstOnce.Do(func() { close(p.first) })
	ctx, cancel := context.WithTimeout(ctx, statusRecountTimeout)
	defer cancel()
	start := p.now()
	counts, err := p.store.Counts(ctx)
	c := &statusCounts{counts: counts}
	took := p.now().Sub(start)
	c.at, c.took = start, took
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastTry, p.lastTook, p.lastErr = start, took, err
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			p.log.Warn("status recount failed", "err", err, "took", took)
		}
		return
	}
	p.snap = c
}

// snapshot returns the current snapshot and asks for a fresher one when
// it is due. Before the first one exists it waits for it, up to
// statusFirstWait.
func (p *statusPage) snapshot(ctx context.Context) (*statusCounts, error) {
	p.mu.Lock()
	snap, lastErr := p.snap, p.lastErr
	p.mu.Unlock()
	if p.due() {
		select {
		case p.kick <- struct{}{}:
		default: // already asked
		}
	}
	if snap != nil {
		return snap, lastErr
	}
	t := time.NewTimer(statusFirstWait)
	defer t.Stop()
	select {
	case <-p.first:
	case <-t.C:
	case <-ctx.Done():
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.snap, p.lastErr
}

// statusReport is the JSON of GET /status. Sections from the snapshot are
// null until the first recount succeeds.
type statusReport struct {
	Version   string          `json:"version"`
	Now       time.Time       `json:"now"`
	Jetstream jetstreamStatus `json:"jetstream"`
	// LastGap is the last stretch of the stream found missed at a
	// reconnect (cursor older than the upstream retention); null if none.
	LastGap  *gapStatus      `json:"last_gap"`
	SyncRuns []syncRunStatus `json:"sync_runs"`
	// CountsAsOf is when the counted sections below were computed;
	// CountsSeconds how long that took; CountsError the last recount's
	// failure, if it failed.
	CountsAsOf    *time.Time      `json:"counts_as_of"`
	CountsSeconds float64         `json:"counts_seconds"`
	CountsError   string          `json:"counts_error,omitempty"`
	Feeds         []feedStatus    `json:"feeds"`
	Follows       *int64          `json:"follows"`
	Targets       *int64          `json:"targets"`
	Backfill      *backfillStatus `json:"backfill"`
	Sweep         *sweepStatus    `json:"sweep"`
}

type jetstreamStatus struct {
	// TimeUS is the committed cursor's time_us, 0 before the first commit.
	TimeUS int64      `json:"time_us"`
	Time   *time.Time `json:"time"`
	Seq    int64      `json:"seq"`
	Host   string     `json:"host"`
	// LagSeconds is the wall clock minus the cursor time; null before the
	// first commit.
	LagSeconds *float64 `json:"lag_seconds"`
}

type gapStatus struct {
	Detected    time.Time `json:"detected"`
	CursorUS    int64     `json:"cursor_time_us"`
	SizeSeconds float64   `json:"size_seconds"`
}

type syncRunStatus struct {
	Kind            string    `json:"kind"`
	Subject         string    `json:"subject"`
	Collection      string    `json:"collection"`
	Outcome         string    `json:"outcome"`
	Error           string    `json:"error,omitempty"`
	Pages           int       `json:"pages"`
	Written         int       `json:"written"`
	Skipped         int       `json:"skipped"`
	Started         time.Time `json:"started"`
	DurationSeconds float64   `json:"duration_seconds"`
}

type feedStatus struct {
	Name    string `json:"name"`
	Viewers int64  `json:"viewers"`
	// Items is the feed's rows over all its collections.
	Items       int64              `json:"items"`
	Collections []collectionStatus `json:"collections"`
}

type collectionStatus struct {
	Collection string `json:"collection"`
	Items      int64  `json:"items"`
}

type backfillStatus struct {
	// Listings counts per-account listings by state: complete, pending,
	// failed (retrying), gone (repo missing or deactivated).
	Listings map[string]int64 `json:"listings"`
	// Failures are the latest failed listings.
	Failures []listingFailure `json:"failures"`
}

type listingFailure struct {
	Account    string     `json:"account"`
	Collection string     `json:"collection"`
	Attempts   int        `json:"attempts"`
	Error      string     `json:"error"`
	NextRetry  *time.Time `json:"next_retry"`
}

type sweepStatus struct {
	// LastPassEnd is when the last full pass over every feed ended; null
	// before the first.
	LastPassEnd         *time.Time `json:"last_pass_end"`
	LastPassSeconds     float64    `json:"last_pass_seconds"`
	LastPassRowsDeleted int64      `json:"last_pass_rows_deleted"`
	CursorViewer        int64      `json:"cursor_viewer"`
}

// Status is the xrpc.Config Status hook.
func (p *statusPage) Status(ctx context.Context) (any, error) {
	now := p.now()
	r := statusReport{Version: p.version, Now: now.UTC(), SyncRuns: []syncRunStatus{}}

	c := p.store.Cursor()
	r.Jetstream = jetstreamStatus{TimeUS: c.TimeUS, Seq: c.Seq, Host: c.Host}
	if c.TimeUS > 0 {
		t := time.UnixMicro(c.TimeUS).UTC()
		lag := now.Sub(t).Seconds()
		r.Jetstream.Time, r.Jetstream.LagSeconds = &t, &lag
	}
	gap, found, err := p.store.LastGap(ctx)
	if err != nil {
		return nil, err
	}
	if found {
		r.LastGap = &gapStatus{Detected: gap.Detected.UTC(), CursorUS: gap.CursorUS, SizeSeconds: gap.Size.Seconds()}
	}
	runs, err := p.store.RecentSyncRuns(ctx, statusSyncRuns)
	if err != nil {
		return nil, err
	}
	for _, run := range runs {
		r.SyncRuns = append(r.SyncRuns, syncRunStatus{
			Kind: run.Kind, Subject: run.Subject, Collection: string(run.Collection),
			Outcome: run.Outcome, Error: run.Error, Pages: run.Pages, Written: run.Written, Skipped: run.Skipped,
			Started: run.Started.UTC(), DurationSeconds: run.Duration.Seconds(),
		})
	}

	snap, countErr := p.snapshot(ctx)
	if countErr != nil {
		r.CountsError = countErr.Error()
	}
	if snap != nil {
		r.fillCounts(snap)
	}
	return r, nil
}

func (r *statusReport) fillCounts(s *statusCounts) {
	at := s.at.UTC()
	r.CountsAsOf, r.CountsSeconds = &at, s.took.Seconds()
	r.Feeds = []feedStatus{}
	for _, f := range s.counts.Feeds {
		fs := feedStatus{Name: f.Feed, Viewers: f.Viewers, Items: f.Items, Collections: []collectionStatus{}}
		for _, l := range s.counts.Lanes {
			if l.Feed == f.Feed {
				fs.Collections = append(fs.Collections, collectionStatus{Collection: string(l.Collection), Items: l.Items})
			}
		}
		r.Feeds = append(r.Feeds, fs)
	}
	r.Follows, r.Targets = &s.counts.Follows, &s.counts.Targets
	b := &backfillStatus{
		Listings: map[string]int64{"complete": 0, "pending": 0, "failed": 0, "gone": 0},
		Failures: []listingFailure{},
	}
	for _, l := range s.counts.Listings {
		b.Listings[l.State] = l.Count
	}
	for _, f := range s.counts.Failures {
		lf := listingFailure{Account: f.Account, Collection: f.Collection, Attempts: f.Attempts, Error: f.Error}
		if !f.NextRetry.IsZero() {
			t := f.NextRetry.UTC()
			lf.NextRetry = &t
		}
		b.Failures = append(b.Failures, lf)
	}
	r.Backfill = b
	sw := s.counts.Sweep
	r.Sweep = &sweepStatus{
		LastPassSeconds: sw.LastPassLap.Seconds(), LastPassRowsDeleted: sw.LastPassRows, CursorViewer: sw.CursorViewer,
	}
	if !sw.LastPassEnd.IsZero() {
		t := sw.LastPassEnd.UTC()
		r.Sweep.LastPassEnd = &t
	}
}
