package xrpc

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/feeds"
)

// fakeProfiles answers from a map and records what it was asked.
type fakeProfiles struct {
	mu    sync.Mutex
	known map[syntax.DID]feeds.Profile
	asked [][]syntax.DID
	err   error
}

func (f *fakeProfiles) Hydrate(_ context.Context, dids []syntax.DID) ([]feeds.Profile, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, dids)
	if f.err != nil {
		return nil, f.err
	}
	out := make([]feeds.Profile, len(dids))
	for i, d := range dids {
		out[i] = feeds.Profile{DID: d}
		if p, ok := f.known[d]; ok {
			out[i] = p
		}
	}
	return out, nil
}

const profileAvatar = "bafkreibme22gw2h7y2h7tg2fhqotaqjucnbc24deqo72b6mkl2egezxhvy"

func TestGetFeedProfiles(t *testing.T) {
	r := goldenReader()
	carol := syntax.DID("did:plc:carol")
	r.add(cursorScope{Feed: "following", Actor: alice, Collection: posts},
		postItem(carol, "3ldddddddddd2", 1795975616991125, 13, `{"$type":"app.bsky.feed.post","text":"carol"}`))
	src := &fakeProfiles{known: map[syntax.DID]feeds.Profile{
		bob: {DID: bob, HandleKnown: true, Handle: "bob.test", Known: true, Present: true, CID: "bafyprofilebob",
			Fields: feeds.ProfileFields{DisplayName: "Bob", Avatar: &feeds.Blob{CID: profileAvatar, MimeType: "image/png", Size: 3}}},
		// carol is known to have no profile and no verified handle.
		carol: {DID: carol, HandleKnown: true, Known: true},
	}}
	cfg := testConfig(r)
	cfg.Profiles = src
	base := serve(t, cfg)

	res := do(t, http.MethodGet, base+getFeedURL+"?feed=following&profiles=true&actor="+string(alice))
	if res.Status != http.StatusOK {
		t.Fatalf("status %d: %s", res.Status, res.Body)
	}
	// One entry per distinct author, in the order of the page (carol's post
	// is newest); fields the appview does not know are left out.
	want := `"profiles":[{"did":"did:plc:carol"},` +
		`{"did":"` + string(bob) + `","handle":"bob.test","displayName":"Bob","avatar":"` + profileAvatar + `",` +
		`"uri":"at://` + string(bob) + `/app.bsky.actor.profile/self","cid":"bafyprofilebob","collection":"app.bsky.actor.profile","rkey":"self",` +
		`"value":{"$type":"app.bsky.actor.profile","displayName":"Bob","avatar":{"$type":"blob","ref":{"$link":"` + profileAvatar + `"},"mimeType":"image/png","size":3}}}]}`
	if body := string(res.Body); len(body) < len(want) || body[len(body)-len(want)-1:len(body)-1] != want {
		t.Errorf("body %s\nwant it to end with %s", body, want)
	}
	if len(src.asked) != 1 || len(src.asked[0]) != 2 {
		t.Errorf("asked %v", src.asked)
	}

	// profiles=false, or absent: no profiles key, nobody asked.
	for _, q := range []string{"&profiles=false", ""} {
		res := do(t, http.MethodGet, base+getFeedURL+"?feed=following&actor="+string(alice)+q)
		if res.Status != http.StatusOK || strings.Contains(string(res.Body), `"profiles"`) {
			t.Errorf("%q: %d %s", q, res.Status, res.Body)
		}
	}
	if len(src.asked) != 1 {
		t.Errorf("asked again: %v", src.asked)
	}

	// A failing source is our own failure.
	src.err = errors.New("disk on fire")
	if res := do(t, http.MethodGet, base+getFeedURL+"?feed=following&profiles=true&actor="+string(alice)); res.Status != http.StatusInternalServerError {
		t.Errorf("failing source: %d %s", res.Status, res.Body)
	}
}

// Without hydration, profiles=true is accepted and answered with an empty
// list, as contrail does; an empty page asks nobody.
func TestGetFeedProfilesOff(t *testing.T) {
	base := serve(t, testConfig(goldenReader()))
	res := do(t, http.MethodGet, base+getFeedURL+"?feed=following&profiles=true&actor="+string(alice))
	if res.Status != http.StatusOK || !strings.Contains(string(res.Body), `,"profiles":[]}`) {
		t.Errorf("hydration off: %d %s", res.Status, res.Body)
	}
	src := &fakeProfiles{}
	cfg := testConfig(newFakeReader())
	cfg.Profiles = src
	base = serve(t, cfg)
	res = do(t, http.MethodGet, base+getFeedURL+"?feed=following&profiles=true&actor="+string(alice))
	if string(res.Body) != `{"records":[],"profiles":[]}`+"\n" || len(src.asked) != 0 {
		t.Errorf("empty page: %s, asked %v", res.Body, src.asked)
	}
}
