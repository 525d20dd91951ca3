package directory

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// A handle's well-known answer is read whole, up to maxHandleAnswerBytes,
// and its DID is what is left once the surrounding whitespace is trimmed.
// That DID is cached as the handle's answer (100,000 of them), and goes on
// with getFeed's actor into the store's remembered actor ids: each must
// hold the DID alone, about 50 bytes, not keep the whole 4 KiB answer a
// handle's host padded it to. Strings hide where they point, so this
// counts the heap the cached answers keep.
func TestACachedHandleAnswerKeepsNoneOfTheBody(t *testing.T) {
	const handles = 2000
	pad := strings.Repeat("\n", maxHandleAnswerBytes/2-40)
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		did := "did:web:" + r.URL.Host
		body := pad + did + pad
		return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader(body)), Header: http.Header{}, Request: r}, nil
	})}
	d := New(Config{PLCURL: "https://plc.invalid", HTTPClient: client, MaxEntries: 2 * handles})
	d.lookupTXT = func(_ context.Context, name string) ([]string, error) {
		return nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
	}
	resolve := func(i int) {
		h := syntax.Handle(fmt.Sprintf("h%d.example.com", i))
		did, err := d.resolveHandle(t.Context(), h)
		if err != nil || did != syntax.DID("did:web:"+h.String()) {
			t.Fatalf("%s: %q, %v", h, did, err)
		}
	}
	resolve(-1) // whatever a first lookup sets up once
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range handles {
		resolve(i)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if n := d.handles.len(); n != handles+1 {
		t.Fatalf("%d handle answers cached, want %d", n, handles+1)
	}
	kept := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / handles
	t.Logf("%d bytes of heap per cached answer", kept)
	// An entry (its key, DID, list element and map slot) is a few hundred
	// bytes; one that kept its answer is over 4 KiB.
	if kept > 1<<10 {
		t.Errorf("each cached handle answer keeps %d bytes of heap: the %d-byte answer its DID was read from", kept, 2*len(pad)+len("did:web:h0.example.com"))
	}
	runtime.KeepAlive(d)
}
