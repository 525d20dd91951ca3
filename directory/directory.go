// Package directory resolves atproto identities: a DID to its PDS endpoint
// and verified handle, and a handle to its DID, with a bounded cache.
//
// Everything it reads comes from strangers (PLC, did:web hosts, handle
// domains), so documents are size-capped and parsed here, and a PDS endpoint
// that points at a private or loopback host is refused: a DID document must
// not be able to aim the appview at internal services.
package directory

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/egress"
)

var (
	// ErrNotFound: the DID or handle does not exist (or its method is not
	// supported).
	ErrNotFound = errors.New("identity not found")
	// ErrHandleMismatch: the handle resolves to a DID whose document does not
	// claim the handle back.
	ErrHandleMismatch = errors.New("handle not claimed by its DID document")
	// ErrInvalidDocument: the DID document is malformed, oversized, for
	// another DID, or has no usable #atproto_pds service.
	ErrInvalidDocument = errors.New("invalid DID document")
	// ErrForbiddenPDS: the PDS endpoint points at a private, loopback or
	// link-local host and private networks are not allowed.
	ErrForbiddenPDS = errors.New("forbidden PDS endpoint")
	// ErrUnavailable: resolution failed for a reason that may pass (network
	// error, timeout, 5xx from the directory).
	ErrUnavailable = errors.New("identity resolution unavailable")
)

// Config configures New. Zero values take the defaults noted.
type Config struct {
	// PLCURL is the PLC directory (default https://plc.directory).
	PLCURL string
	// HandleResolverURL, when set, is an XRPC service answering
	// com.atproto.identity.resolveHandle, used instead of DNS and HTTPS
	// well-known lookups (local networks with .test handles need it).
	HandleResolverURL string
	// HitTTL and ErrTTL bound how long answers and failures are cached
	// (default 1h and 2m); a failure that may pass (ErrUnavailable) is
	// cached for a quarter of ErrTTL.
	HitTTL, ErrTTL time.Duration
	// MaxEntries bounds the answers each of the DID and handle caches
	// keeps (default 100,000). Failures are bounded apart, at a tenth of
	// it, so lookups that fail push out only other failures.
	MaxEntries int
	// MaxFetches bounds each cache's lookups in flight (default 256); one
	// more fails at once with ErrUnavailable and is not cached.
	MaxFetches int
	// HTTPClient is used for every request (default an egress client that
	// follows AllowPrivateNetworks).
	HTTPClient *http.Client
	// AllowPrivateNetworks accepts PDS endpoints on private, loopback and
	// link-local hosts.
	AllowPrivateNetworks bool
	// SkipHandleVerification makes LookupDID skip the handle round trip and
	// return an empty Handle: for callers that need only the PDS.
	SkipHandleVerification bool
	// Timeout bounds one resolution, shared by every caller waiting on it
	// (default 30s).
	Timeout time.Duration
	// Now is the clock for cache expiry (default time.Now).
	Now func() time.Time
	// OnPause, when set, is called each time the PLC directory or the
	// handle resolver answers 429 or 503 and lookups pause (pause.go),
	// with the service's name ("PLC directory", "handle resolver"), the
	// answer's status and the pause's length. It must not block.
	OnPause func(service string, status int, wait time.Duration)
}

const (
	defaultPLCURL     = "https://plc.directory"
	defaultHitTTL     = time.Hour
	defaultErrTTL     = 2 * time.Minute
	defaultMaxEntries = 100_000
	defaultMaxFetches = 256
	defaultTimeout    = 30 * time.Second

	// maxDocumentBytes caps a DID document; real ones are about 1 KiB.
	maxDocumentBytes = 64 << 10
	// maxHandleAnswerBytes caps a resolveHandle answer.
	maxHandleAnswerBytes = 4 << 10
)

// Identity is what the appview needs to know about an account.
type Identity struct {
	DID syntax.DID
	// Handle is empty unless it was verified in both directions.
	Handle syntax.Handle
	// HandleUnchecked is set when the document claims a handle that could
	// not be checked for now (ErrUnavailable: DNS or HTTP failing): an
	// empty Handle then says nothing about the handle, and a caller that
	// keeps it should ask again later.
	HandleUnchecked bool
	// PDS is the http(s) URL of the #atproto_pds service, without a
	// trailing slash.
	PDS string
}

// Directory resolves and caches identities. It is safe for concurrent use.
type Directory struct {
	cfg    Config
	client *http.Client
	plcURL string
	// lookupTXT is net.DefaultResolver.LookupTXT outside tests.
	lookupTXT func(ctx context.Context, name string) ([]string, error)
	docs      *cache[document]
	handles   *cache[syntax.DID]
	// plcPause and resolverPause hold off the PLC directory and the
	// handle resolver after a 429 or 503 (pause.go).
	plcPause, resolverPause *pause
}

// New returns a Directory for cfg.
func New(cfg Config) *Directory {
	if cfg.PLCURL == "" {
		cfg.PLCURL = defaultPLCURL
	}
	if cfg.HitTTL <= 0 {
		cfg.HitTTL = defaultHitTTL
	}
	if cfg.ErrTTL <= 0 {
		cfg.ErrTTL = defaultErrTTL
	}
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = defaultMaxEntries
	}
	if cfg.MaxFetches <= 0 {
		cfg.MaxFetches = defaultMaxFetches
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = defaultTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = egress.NewClient(egress.Options{AllowPrivateNetworks: cfg.AllowPrivateNetworks})
	}
	d := &Directory{
		cfg:       cfg,
		client:    cfg.HTTPClient,
		plcURL:    strings.TrimRight(cfg.PLCURL, "/"),
		lookupTXT: net.DefaultResolver.LookupTXT,
		docs:      newCache[document](cfg),
		handles:   newCache[syntax.DID](cfg),

		plcPause:      &pause{service: ServicePLC, probeTimeout: cfg.Timeout, onPause: cfg.OnPause},
		resolverPause: &pause{service: ServiceHandleResolver, probeTimeout: cfg.Timeout, onPause: cfg.OnPause},
	}
	return d
}

// LookupDID resolves did to its PDS endpoint and, unless
// SkipHandleVerification is set, its handle when that resolves back to did.
func (d *Directory) LookupDID(ctx context.Context, did syntax.DID) (*Identity, error) {
	return d.lookupDID(ctx, did, !d.cfg.SkipHandleVerification)
}

// LookupDIDWithHandle is LookupDID with the handle verified even when the
// directory is configured to skip it: for the callers that show handles
// (profile hydration), sharing the cache with those that need only the PDS.
func (d *Directory) LookupDIDWithHandle(ctx context.Context, did syntax.DID) (*Identity, error) {
	return d.lookupDID(ctx, did, true)
}

func (d *Directory) lookupDID(ctx context.Context, did syntax.DID, verifyHandle bool) (*Identity, error) {
	doc, err := d.document(ctx, did)
	if err != nil {
		return nil, err
	}
	ident := &Identity{DID: did, PDS: doc.pds}
	if doc.handle == "" || !verifyHandle {
		return ident, nil
	}
	// A handle that fails to resolve only leaves Handle empty; the account
	// is still usable through its DID.
	resolved, err := d.resolveHandle(ctx, doc.handle)
	if err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err == nil && resolved == did {
		ident.Handle = doc.handle
	}
	ident.HandleUnchecked = errors.Is(err, ErrUnavailable)
	return ident, nil
}

// LookupHandle resolves handle to a DID and checks that the DID document
// claims the handle back (ErrHandleMismatch otherwise).
func (d *Directory) LookupHandle(ctx context.Context, handle syntax.Handle) (*Identity, error) {
	handle = handle.Normalize()
	if handle.IsInvalidHandle() {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, handle)
	}
	did, err := d.resolveHandle(ctx, handle)
	if err != nil {
		return nil, err
	}
	doc, err := d.document(ctx, did)
	if err != nil {
		return nil, err
	}
	if doc.handle != handle {
		return nil, fmt.Errorf("%w: %s resolves to %s, which claims %q", ErrHandleMismatch, handle, did, doc.handle)
	}
	return &Identity{DID: did, Handle: handle, PDS: doc.pds}, nil
}

// HandleCached reports whether LookupHandle would answer handle from the
// cache alone: its resolution is cached, and so is the document of the
// DID it resolved to. A cached failure counts: it is answered as well.
func (d *Directory) HandleCached(handle syntax.Handle) bool {
	handle = handle.Normalize()
	if handle.IsInvalidHandle() {
		return true // refused without a lookup
	}
	e, ok := d.handles.lookup(handle.String())
	if !ok {
		return false
	}
	if e.err != nil {
		return true
	}
	_, ok = d.docs.lookup(e.val.String())
	return ok
}

// Purge forgets what is cached about did and about the handle its cached
// document claimed, so the next lookup asks again (Jetstream identity
// events). A resolution already in flight is not cached when it ends.
func (d *Directory) Purge(did syntax.DID) {
	if doc, ok := d.docs.purge(did.String()); ok && doc.handle != "" {
		d.handles.purge(doc.handle.String())
	}
}

// PurgeIdentity forgets what an identity event makes stale: the account's
// document (Purge), and the cached resolution of the handle the event
// names, which may still point at the account that held the handle
// before. That resolution outlives the old holder's document when the
// document cache, bounded apart, let the document go first; the new
// holder's handle then failed to verify for up to an hour. The event's
// handle is only a hint of what to forget, never taken as verified.
func (d *Directory) PurgeIdentity(did syntax.DID, handle string) {
	d.Purge(did)
	if h, err := syntax.ParseHandle(handle); err == nil {
		d.PurgeHandle(h)
	}
}

// PurgeAll forgets everything cached: after a gap in the stream the
// identity events that would have purged entries one by one are lost.
func (d *Directory) PurgeAll() {
	d.docs.purgeAll()
	d.handles.purgeAll()
}

// PurgeHandle forgets the cached resolution of handle.
func (d *Directory) PurgeHandle(handle syntax.Handle) {
	d.handles.purge(handle.Normalize().String())
}

func (d *Directory) document(ctx context.Context, did syntax.DID) (document, error) {
	return d.docs.get(ctx, did.String(), func(ctx context.Context) (document, error) {
		return d.fetchDocument(ctx, did)
	})
}

func (d *Directory) resolveHandle(ctx context.Context, handle syntax.Handle) (syntax.DID, error) {
	return d.handles.get(ctx, handle.String(), func(ctx context.Context) (syntax.DID, error) {
		if d.cfg.HandleResolverURL != "" {
			return d.resolveHandleXRPC(ctx, handle)
		}
		return d.resolveHandleNetwork(ctx, handle)
	})
}
