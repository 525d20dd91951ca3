package appview

import (
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/jetstream/jetstreamtest"
)

// TestDaemonFilters: fields declared in the config reach the store and
// getFeed, from a Jetstream post to a filtered page.
func TestDaemonFilters(t *testing.T) {
	js := jetstreamtest.NewServer()
	defer js.Close()
	cfg := testConfig(t, js, t.TempDir()+"/appview.db")
	cfg.Feeds[0].Targets[0].Fields = exampleFields()
	td := startDaemon(t, js, cfg)
	// Posts two seconds apart: their createdAt strings keep milliseconds.
	js.Append(
		jetstreamtest.Follow(followNSID, user("alice"), "f1", user("carol"), t0+1),
		jetstreamtest.Post(user("carol"), "p1", t0+10_000_000, "one"),
		jetstreamtest.Post(user("carol"), "p2", t0+12_000_000, "two"),
		jetstreamtest.Post(user("carol"), "p3", t0+14_000_000, "three"),
	)
	td.waitCursor(t, t0+14_000_000)

	read := func(kv ...string) []string {
		q := url.Values{"feed": {"following"}, "actor": {user("alice")}}
		for i := 0; i < len(kv); i += 2 {
			q.Set(kv[i], kv[i+1])
		}
		var page feedResponse
		td.getJSON(t, "/xrpc/com.example.appview.getFeed?"+q.Encode(), &page)
		var out []string
		for _, r := range page.Records {
			out = append(out, r.RKey)
		}
		return out
	}
	if got, want := read("langs", "en"), []string{"p3", "p2", "p1"}; !slices.Equal(got, want) {
		t.Errorf("langs=en: %v, want %v", got, want)
	}
	if got := read("langs", "pt"); len(got) != 0 {
		t.Errorf("langs=pt: %v", got)
	}
	at := time.UnixMicro(t0 + 12_000_000).UTC().Format(syntax.AtprotoDatetimeLayout)
	if got, want := read("createdAtMin", at), []string{"p3", "p2"}; !slices.Equal(got, want) {
		t.Errorf("createdAtMin=%s: %v, want %v", at, got, want)
	}
	if got, want := read("createdAtMax", at, "langs", "en"), []string{"p2", "p1"}; !slices.Equal(got, want) {
		t.Errorf("createdAtMax=%s&langs=en: %v, want %v", at, got, want)
	}
}
