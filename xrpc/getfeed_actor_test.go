package xrpc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/directory"
	"github.com/atfeeds/appview/directory/plctest"
	"github.com/atfeeds/appview/feeds"
)

// directoryActors adapts a real directory, pointed at loopback stand-ins
// for PLC and the handle resolver, to ActorResolver.
type directoryActors struct{ dir *directory.Directory }

func (a directoryActors) HandleCached(h syntax.Handle) bool { return a.dir.HandleCached(h) }

func (a directoryActors) ResolveHandle(ctx context.Context, h syntax.Handle) (syntax.DID, error) {
	id, err := a.dir.LookupHandle(ctx, h)
	if err != nil {
		return "", err
	}
	return id.DID, nil
}

func newDirectory(plcURL, resolverURL string) directoryActors {
	return directoryActors{directory.New(directory.Config{
		PLCURL:               plcURL,
		HandleResolverURL:    resolverURL,
		AllowPrivateNetworks: true,
	})}
}

// TestGetFeedActorResolutionErrors: only a handle that does not resolve,
// or whose DID document does not claim it back, is ActorNotFound (400). A
// directory that cannot answer is an upstream failure (502), one paused by
// its service's 503 or 429 is busy (503 with the pause's Retry-After),
// one too slow for the request an upstream timeout (504): none says
// anything about whether the actor exists.
func TestGetFeedActorResolutionErrors(t *testing.T) {
	plc := plctest.NewServer()
	t.Cleanup(plc.Close)
	plc.Add(alice, "alice.test", "https://pds.example.com")
	plc.Add(bob, "bob.test", "https://pds.example.com")
	plc.SetHandle("impostor.test", bob)
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "upstream failed", http.StatusInternalServerError)
	}))
	t.Cleanup(down.Close)
	// A 503 (or 429) pauses the service: the directory did not fail, it
	// was asked to wait, and says how long.
	busy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "9")
		http.Error(w, "upstream unavailable", http.StatusServiceUnavailable)
	}))
	t.Cleanup(busy.Close)
	refused := httptest.NewServer(http.NotFoundHandler())
	refused.Close()

	for _, tc := range []struct {
		name, plc, resolver, actor string
		status                     int
		errName, retryAfter        string
	}{
		{"resolves", plc.URL(), plc.URL(), "alice.test", http.StatusOK, "", ""},
		{"unknown handle", plc.URL(), plc.URL(), "nobody.test", http.StatusBadRequest, "ActorNotFound", ""},
		{"handle not claimed back", plc.URL(), plc.URL(), "impostor.test", http.StatusBadRequest, "ActorNotFound", ""},
		{"resolver 500", plc.URL(), down.URL, "alice.test", http.StatusBadGateway, "UpstreamFailure", ""},
		{"resolver refuses connections", plc.URL(), refused.URL, "alice.test", http.StatusBadGateway, "UpstreamFailure", ""},
		{"PLC 500", down.URL, plc.URL(), "alice.test", http.StatusBadGateway, "UpstreamFailure", ""},
		{"resolver 503", plc.URL(), busy.URL, "alice.test", http.StatusServiceUnavailable, "NotEnoughResources", "9"},
		{"PLC 503", busy.URL, plc.URL(), "alice.test", http.StatusServiceUnavailable, "NotEnoughResources", "9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(goldenReader())
			cfg.Actors = newDirectory(tc.plc, tc.resolver)
			base := serve(t, cfg)
			res := do(t, http.MethodGet, base+getFeedURL+"?feed=following&actor="+tc.actor)
			if res.Status != tc.status {
				t.Fatalf("status %d, body %s; want %d", res.Status, res.Body, tc.status)
			}
			if tc.errName != "" {
				if env := decodeEnvelope(t, res.Body); env.Error != tc.errName {
					t.Fatalf("error %q, want %q", env.Error, tc.errName)
				}
			}
			if got := res.Header.Get("Retry-After"); got != tc.retryAfter {
				t.Fatalf("Retry-After %q, want %q", got, tc.retryAfter)
			}
		})
	}
}

// TestGetFeedActorResolutionTimeout: a directory that hangs is cut off
// well within the server's write timeout and answered with 504, so the
// client gets an XRPC answer rather than a dropped connection.
func TestGetFeedActorResolutionTimeout(t *testing.T) {
	plc := plctest.NewServer()
	t.Cleanup(plc.Close)
	plc.Add(alice, "alice.test", "https://pds.example.com")
	plc.Block()
	cfg := testConfig(goldenReader())
	cfg.Actors = newDirectory(plc.URL(), plc.URL())
	cfg.Timeouts = Timeouts{Write: 1500 * time.Millisecond}
	base := serve(t, cfg)
	start := time.Now()
	res := do(t, http.MethodGet, base+getFeedURL+"?feed=following&actor=alice.test")
	if res.Status != http.StatusGatewayTimeout || decodeEnvelope(t, res.Body).Error != "UpstreamTimeout" {
		t.Fatalf("status %d, body %s; want 504 UpstreamTimeout", res.Status, res.Body)
	}
	if took := time.Since(start); took >= 1500*time.Millisecond {
		t.Fatalf("answered after %s, not within the write timeout", took)
	}
}

// TestActorErrorIsNeverInternal: whatever the resolver returns, the client
// sees a 4xx or an upstream status, never our own 500.
func TestActorErrorIsNeverInternal(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
	}{
		{fmt.Errorf("%w: nobody.test", directory.ErrNotFound), http.StatusBadRequest},
		{fmt.Errorf("%w: x", directory.ErrHandleMismatch), http.StatusBadRequest},
		{fmt.Errorf("%w: x", directory.ErrInvalidDocument), http.StatusBadRequest},
		{fmt.Errorf("%w: x", directory.ErrForbiddenPDS), http.StatusBadRequest},
		{fmt.Errorf("%w: status 503", directory.ErrUnavailable), http.StatusBadGateway},
		{fmt.Errorf("%w: %w", directory.ErrUnavailable, context.DeadlineExceeded), http.StatusGatewayTimeout},
		{context.DeadlineExceeded, http.StatusGatewayTimeout},
		{context.Canceled, http.StatusGatewayTimeout},
		{errors.New("something else"), http.StatusBadGateway},
		{fmt.Errorf("resolve x: %w", directory.ErrBusy), http.StatusServiceUnavailable},
		{&directory.PausedError{Service: "handle resolver", Left: time.Second}, http.StatusServiceUnavailable},
	} {
		if xe := actorError("alice.test", tc.err); xe.Status != tc.status {
			t.Errorf("%v: got %d %s, want %d", tc.err, xe.Status, xe.Name, tc.status)
		}
	}
}

// TestAMangledCursorIsRefusedBeforeTheHandleLookup: a cursor's check needs
// the actor's DID, but its shape does not. A mangled cursor beside a
// handle actor is a 400 without asking the directory, whatever state the
// directory is in; a well-formed cursor waits for the DID, and one made
// for another actor is then refused too.
func TestAMangledCursorIsRefusedBeforeTheHandleLookup(t *testing.T) {
	actors := &answeringActors{}
	cfg := testConfig(goldenReader())
	cfg.Actors = actors
	base := serve(t, cfg)
	feedURL := base + getFeedURL + "?feed=following&actor=alice.test&cursor="

	for _, cursor := range []string{"hello", strings.Repeat("A", 34), "!" + strings.Repeat("A", 33)} {
		res := do(t, http.MethodGet, feedURL+cursor)
		if res.Status != http.StatusBadRequest || decodeEnvelope(t, res.Body).Error != "InvalidRequest" {
			t.Fatalf("cursor %q: %d %s, want 400 InvalidRequest", cursor, res.Status, res.Body)
		}
	}
	if n := actors.asked.Load(); n != 0 {
		t.Fatalf("%d handle lookups for mangled cursors, want none", n)
	}

	scope := cursorScope{Feed: "following", Actor: alice, Collection: posts}
	if res := do(t, http.MethodGet, feedURL+encodeCursor(scope, feeds.PageKey{SortUS: 5, RecordID: 7})); res.Status != http.StatusOK {
		t.Fatalf("alice's own cursor: %d %s, want 200", res.Status, res.Body)
	}
	scope.Actor = bob
	res := do(t, http.MethodGet, feedURL+encodeCursor(scope, feeds.PageKey{SortUS: 5, RecordID: 7}))
	if res.Status != http.StatusBadRequest {
		t.Fatalf("bob's cursor for alice's feed: %d %s, want 400", res.Status, res.Body)
	}
	if n := actors.asked.Load(); n != 2 {
		t.Fatalf("%d handle lookups, want 2: well-formed cursors are checked against the DID", n)
	}
}
