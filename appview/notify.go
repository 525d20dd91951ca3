package appview

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/atfeeds/appview/backfill"
	"github.com/atfeeds/appview/directory"
	"github.com/atfeeds/appview/egress"
	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/internal/textclip"
	"github.com/atfeeds/appview/pds"
	"github.com/atfeeds/appview/xrpc"
)

const (
	// notifyFetchTimeout bounds the resolving and fetching of one call's
	// records, and notifyApplyTimeout its write, so that the answer leaves
	// before the HTTP server's write timeout (15 s).
	notifyFetchTimeout = 9 * time.Second
	notifyApplyTimeout = 4 * time.Second
	// notifyConcurrency bounds the records of one call fetched at once;
	// a record waiting for its PDS host's request slot (notifyPerHost)
	// holds none of them, nor one waiting for them a host's (takeSlots).
	notifyConcurrency = 8
	// notifyGlobal and notifyPerHost bound the getRecord requests of all
	// calls together, overall and to one PDS host: calls arrive in
	// parallel, and an app that notifies for many records of accounts on
	// one PDS must not turn us into a load on it. A record that waits out
	// the call's fetch time for a slot fails with UpstreamFailure.
	notifyGlobal  = 32
	notifyPerHost = 4
)

// notifier implements notifyOfUpdate (xrpc.Notifier): for each URI it
// reads what the store holds, resolves the author's PDS, fetches the
// record with getRecord (a missing record is a delete), and applies every
// fetched record in one transaction through the store's ingest path
// (feeds.Store.ApplyNotified explains how records without a rev stay
// idempotent and never override newer Jetstream data). The write counts
// as an ingest tick for the prune sweep, and the follows it creates get
// their followees' backlog fetched as on the stream.
type notifier struct {
	store    *feeds.Store
	resolver backfill.Resolver
	pds      *pds.Client
	limits   *pds.Limiter
	// paused holds the PDS hosts that answered 429, to a getRecord or to
	// the daemon's other PDS clients, which share it: their records fail
	// at once until the time the host gave.
	paused   *pds.HostPauses
	follows  map[syntax.NSID]bool
	log      *slog.Logger
	outcomes *prometheus.CounterVec
	// afterCommit, when set, is told about every committed write.
	afterCommit func(feeds.BatchResult)
	now         func() time.Time
}

// wireNotify serves notifyOfUpdate from xcfg's server when the config
// enables it. It shares the directory (and its cache) and the paused PDS
// hosts with the backfill, and hands the follows it creates to
// followsCreated, as the ingester does.
func wireNotify(xcfg *xrpc.Config, cfg Config, store *feeds.Store, dir backfill.Resolver, paused *pds.HostPauses,
	reg prometheus.Registerer, log *slog.Logger, followsCreated func([]feeds.FollowEdge)) {
	if !cfg.Notify.Enabled {
		return
	}
	httpc := egress.NewClient(egress.Options{
		AllowPrivateNetworks: cfg.Identity.AllowPrivateNetworks,
		Timeout:              cfg.Backfill.RequestTimeout,
		UserAgent:            "atfeeds-appview/" + Version,
	})
	n := &notifier{
		store:    store,
		resolver: dir,
		pds:      pds.NewClient(httpc, pds.Options{Timeout: cfg.Backfill.RequestTimeout}),
		limits:   pds.NewLimiter(notifyGlobal, notifyPerHost),
		paused:   paused,
		follows:  map[syntax.NSID]bool{},
		log:      log.With("component", "notify"),
		afterCommit: func(res feeds.BatchResult) {
			if len(res.NewFollows) > 0 {
				followsCreated(res.NewFollows)
			}
		},
		now: time.Now,
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "appview", Subsystem: "notify", Name: "records_total",
			Help: "Records handled by notifyOfUpdate, by outcome: written, unchanged, deleted, absent, superseded (the stream stored a newer version meanwhile), or the per-URI error in snake case.",
		}, []string{"outcome"}),
	}
	for _, c := range cfg.FollowCollections() {
		n.follows[syntax.NSID(c)] = true
	}
	reg.MustRegister(n.outcomes)
	xcfg.Notify, xcfg.NotifySecret = n, cfg.Notify.Secret
}

// notifyItem is one URI on its way through a call.
type notifyItem struct {
	uri     syntax.ATURI
	rec     feeds.Notified
	err     *xrpc.NotifyError
	outcome feeds.NotifyOutcome
	stored  bool
}

// NotifyOfUpdate implements xrpc.Notifier.
func (n *notifier) NotifyOfUpdate(ctx context.Context, uris []syntax.ATURI) (xrpc.NotifyResult, error) {
	items := make([]notifyItem, len(uris))
	fctx, cancel := context.WithTimeout(ctx, notifyFetchTimeout)
	var (
		wg    sync.WaitGroup
		sem   = make(chan struct{}, notifyConcurrency)
		mu    sync.Mutex
		fatal error
	)
	for i, u := range uris {
		items[i].uri = u
		wg.Add(1)
		go func(it *notifyItem) {
			defer wg.Done()
			if err := n.fetch(fctx, it, sem); err != nil {
				mu.Lock()
				fatal = errors.Join(fatal, err)
				mu.Unlock()
			}
		}(&items[i])
	}
	wg.Wait()
	cancel()
	if fatal != nil {
		return xrpc.NotifyResult{}, fatal
	}

	var recs []feeds.Notified
	for i := range items {
		if items[i].err == nil {
			recs = append(recs, items[i].rec)
		}
	}
	if len(recs) > 0 {
		// A client that hangs up after the fetch does not abort the write.
		// The caller waits on it: a catch-up's batch commits early for it.
		actx, cancel := context.WithTimeout(feeds.Urgent(context.WithoutCancel(ctx)), notifyApplyTimeout)
		defer cancel()
		results, res, err := n.store.ApplyNotified(actx, recs)
		if errors.Is(err, feeds.ErrWriteBusy) || (err != nil && actx.Err() != nil) {
			// Waited out its time for the write lock: a 503, not a 500.
			return xrpc.NotifyResult{}, fmt.Errorf("%w: %v", xrpc.ErrNotifyBusy, err)
		}
		if err != nil {
			return xrpc.NotifyResult{}, err
		}
		if n.afterCommit != nil {
			n.afterCommit(res)
		}
		if res.Applied > 0 {
			// An ingest tick: a fan-out grew feeds the sweep must trim.
			tick := feeds.Tick{Now: n.now(), Mutated: res.MutatedFeeds(), Events: res.Applied, Rows: res.FanoutRows + res.MergedRows}
			if _, err := n.store.SweepTick(actx, tick); err != nil {
				n.log.Error("sweep tick after notifyOfUpdate", "err", err)
			}
		}
		j := 0
		for i := range items {
			if items[i].err == nil {
				items[i].outcome, items[i].stored = results[j].Outcome, results[j].Stored
				if items[i].outcome == feeds.NotifyOutOfScope {
					items[i].err = notInScope(items[i].uri, items[i].rec.Collection)
				}
				j++
			}
		}
	}

	var out xrpc.NotifyResult
	for i := range items {
		it := &items[i]
		switch {
		case it.err != nil:
			out.Errors = append(out.Errors, *it.err)
			n.outcomes.WithLabelValues(snakeCase(it.err.Error)).Inc()
			continue
		case it.stored:
			out.Indexed = append(out.Indexed, it.uri.String())
		default:
			out.Deleted = append(out.Deleted, it.uri.String())
		}
		n.outcomes.WithLabelValues(it.outcome.String()).Inc()
	}
	return out, nil
}

// fetch fills it.rec, or it.err for a per-URI failure, holding one of
// the call's slots (sem) but while it waits for its PDS host's. An error
// return is the daemon's own failure (the database read).
func (n *notifier) fetch(ctx context.Context, it *notifyItem, sem chan struct{}) error {
	fail := func(name, msg string) error {
		it.err = &xrpc.NotifyError{URI: it.uri.String(), Error: name, Message: msg}
		switch name {
		case xrpc.NotifyErrInvalidRecord, xrpc.NotifyErrAccountNotFound, xrpc.NotifyErrUpstreamFailure:
			// What a PDS or the directory answered: counted in
			// appview_notify_records_total, and said once here.
			n.log.Info("notified record not indexed", "uri", it.uri.String(), "error", name, "detail", textclip.Clip(msg, 200))
		}
		return nil
	}
	did, err := it.uri.Authority().AsDID()
	if err != nil {
		return fail(xrpc.NotifyErrInvalidURI, "the authority must be a DID")
	}
	coll, rkey := it.uri.Collection(), it.uri.RecordKey()
	if coll == "" || rkey == "" || it.uri.String() != "at://"+did.String()+"/"+coll.String()+"/"+rkey.String() {
		return fail(xrpc.NotifyErrInvalidURI, "not a record URI: at://<did>/<collection>/<rkey>")
	}
	if !takeSlot(ctx, sem) {
		return fail(xrpc.NotifyErrUpstreamFailure, "timed out")
	}
	held := true
	defer func() {
		if held {
			<-sem
		}
	}()
	key := feeds.RecordKey{DID: did, Collection: coll, RKey: rkey}
	before, err := n.store.LookupRecord(ctx, key, n.now())
	switch {
	case errors.Is(err, feeds.ErrUnknownLane):
		return fail(xrpc.NotifyErrUnsupportedCollection, "no feed uses "+coll.String())
	case err != nil && ctx.Err() != nil:
		return fail(xrpc.NotifyErrUpstreamFailure, "timed out")
	case err != nil:
		return err
	case !before.InScope:
		it.err = notInScope(it.uri, coll)
		return nil
	}
	ident, err := n.resolver.LookupDID(ctx, did)
	switch {
	case errors.Is(err, directory.ErrNotFound), errors.Is(err, directory.ErrInvalidDocument), errors.Is(err, directory.ErrForbiddenPDS):
		return fail(xrpc.NotifyErrAccountNotFound, err.Error())
	case err != nil:
		return fail(xrpc.NotifyErrUpstreamFailure, err.Error())
	}
	it.rec = feeds.Notified{RecordKey: key, Before: before}
	host, err := url.Parse(ident.PDS)
	if err != nil {
		return fail(xrpc.NotifyErrAccountNotFound, "the PDS endpoint is not a URL")
	}
	// A host that rate limited us is not asked before the time it gave,
	// by this call or another; the call is not held for that time (the
	// HTTP write timeout bounds it), the record fails at once and the app
	// may retry later (TestNotifyWaitsOutAHostsRateLimit).
	if err := n.paused.Check(host.Host, n.now()); err != nil {
		return fail(xrpc.NotifyErrUpstreamFailure, hostPausedMessage(host.Host, err))
	}
	// The call's slot is let go while the record waits for its host's:
	// records on a hanging PDS held them all as they waited, and the
	// call's records on healthy PDSes waited for one until the call's
	// fetch time ran out
	// (TestNotifyRecordsOnAHealthyPDSAreNotHeldBehindAHangingOne).
	<-sem
	held = false
	release, err := n.takeSlots(ctx, host.Host, sem)
	held = err == nil
	if err != nil {
		return fail(xrpc.NotifyErrUpstreamFailure, "timed out waiting for a request slot to "+host.Host)
	}
	// The host may have asked us to wait while this record waited for a
	// slot (TestNotifyNoRequestReachesAPausedHostFromTheSlotQueue).
	if err := n.paused.Check(host.Host, n.now()); err != nil {
		release()
		return fail(xrpc.NotifyErrUpstreamFailure, hostPausedMessage(host.Host, err))
	}
	rec, err := n.pds.GetRecord(ctx, ident.PDS, did, coll, rkey)
	// Paused before the slot is given back: no record queued for it is
	// sent to a host that just answered 429.
	n.paused.Note(host.Host, err, n.now())
	release()
	switch pds.KindOf(err) {
	case 0:
		if err != nil {
			return fail(xrpc.NotifyErrUpstreamFailure, err.Error())
		}
	case pds.KindNotFound:
		return nil // a delete
	case pds.KindRepoGone, pds.KindForbidden:
		// Forbidden: the endpoint's name resolved to an address the
		// egress guard refuses, which asking again will not change, as
		// a document naming a forbidden PDS outright (above).
		return fail(xrpc.NotifyErrAccountNotFound, err.Error())
	case pds.KindBadResponse:
		return fail(xrpc.NotifyErrInvalidRecord, err.Error())
	default:
		return fail(xrpc.NotifyErrUpstreamFailure, err.Error())
	}
	if rec.CID == "" {
		return fail(xrpc.NotifyErrInvalidRecord, "the PDS sent the record without its cid")
	}
	// Read as the stream reads it: exact keys, a pre-epoch date sinking.
	head, ok := feeds.ParseRecordHead(rec.Value)
	if !ok {
		return fail(xrpc.NotifyErrInvalidRecord, "the record is not a JSON object")
	}
	it.rec.Present, it.rec.CID, it.rec.Record = true, rec.CID, rec.Value
	it.rec.CreatedAtUS = head.CreatedAtUS
	if n.follows[coll] {
		if it.rec.Subject, err = syntax.ParseDID(head.Subject); err != nil {
			return fail(xrpc.NotifyErrInvalidRecord, "the follow's subject is not a DID string")
		}
	}
	return nil
}

// takeSlots takes a request slot of host (n.limits) and one of the call's
// slots (sem), and never waits for either holding the other: a record
// holding a host's slot while it waited for a slot of its call, whose
// slots were all in requests to hanging PDSes, kept every other call's
// records on that host waiting for as long
// (TestNotifyACallWaitingForItsSlotsHoldsNoHostSlotOfAnother). Each turn
// of the loop waits for a slot to come free, so it does not spin.
func (n *notifier) takeSlots(ctx context.Context, host string, sem chan struct{}) (release func(), err error) {
	for {
		release, err := n.limits.Acquire(ctx, host)
		if err != nil {
			return nil, err
		}
		select {
		case sem <- struct{}{}:
			return release, nil
		default:
		}
		release()
		if !takeSlot(ctx, sem) {
			return nil, ctx.Err()
		}
		if release, ok := n.limits.TryAcquire(host); ok {
			return release, nil
		}
		<-sem
	}
}

// hostPausedMessage is the per-URI message of a record not fetched
// because its host is paused (err is the pause's *pds.Error).
func hostPausedMessage(host string, err error) string {
	var wait time.Duration
	var pe *pds.Error
	if errors.As(err, &pe) {
		wait = pe.RetryAfter
	}
	return fmt.Sprintf("%s rate limited us: not asked again before the time it gave; retry in %ds", host, int(math.Ceil(wait.Seconds())))
}

// takeSlot takes one of sem's slots, false if ctx ends first.
func takeSlot(ctx context.Context, sem chan struct{}) bool {
	select {
	case sem <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func notInScope(u syntax.ATURI, coll syntax.NSID) *xrpc.NotifyError {
	return &xrpc.NotifyError{URI: u.String(), Error: xrpc.NotifyErrNotInScope,
		Message: fmt.Sprintf("no viewer of this appview needs this account's %s records", coll)}
}

// snakeCase turns an error name (UpstreamFailure) into a metric label
// (upstream_failure).
func snakeCase(name string) string {
	var b strings.Builder
	for i, r := range name {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
