package xrpc

import (
	"strings"
	"testing"
	"unsafe"
)

// url.ParseQuery leaves an unescaped value in place, a slice of the raw
// query string, which MaxHeaderBytes lets grow to 256 KB. The actor
// getFeed parses goes on into caches that outlive the request: the
// store's remembered viewer ids and writer's actor ids (a DID), the
// directory's answers and failures (a handle). Each must hold the actor
// alone, not keep the whole query alive.
func TestGetFeedActorKeepsNoneOfTheQuery(t *testing.T) {
	s := NewServer(testConfig(goldenReader()))
	pad := "&pad=" + strings.Repeat("x", 256<<10)
	for _, actor := range []string{string(alice), "alice.example.com"} {
		raw := "feed=following&actor=" + actor + pad
		p, xe := s.parseFeedParams(raw)
		if xe != nil {
			t.Fatalf("%s: %+v", actor, xe)
		}
		got := string(p.Scope.Actor)
		if p.Handle != "" {
			got = string(p.Handle)
		}
		if got != actor {
			t.Fatalf("parsed actor %q, want %q", got, actor)
		}
		start := uintptr(unsafe.Pointer(unsafe.StringData(raw)))
		if at := uintptr(unsafe.Pointer(unsafe.StringData(got))); at >= start && at < start+uintptr(len(raw)) {
			t.Errorf("actor %s points into the %d-byte query string it was parsed from", actor, len(raw))
		}
	}
}
