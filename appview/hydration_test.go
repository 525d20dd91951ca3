package appview

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/jetstream/jetstreamtest"
	"github.com/atfeeds/appview/pds/pdstest"
)

type hydratedPage struct {
	Records []struct {
		DID string `json:"did"`
	} `json:"records"`
	Profiles []struct {
		DID         string `json:"did"`
		Handle      string `json:"handle"`
		DisplayName string `json:"displayName"`
		Avatar      string `json:"avatar"`
		Value       *struct {
			DisplayName string `json:"displayName"`
		} `json:"value"`
	} `json:"profiles"`
}

// profiles reads alice's feed with profiles=true and returns the profiles
// by DID, and how long the read took.
func (td *testDaemon) profiles(t *testing.T, actor string) (map[string]string, time.Duration) {
	t.Helper()
	var page hydratedPage
	start := time.Now()
	td.getJSON(t, "/xrpc/com.example.appview.getFeed?"+url.Values{"feed": {"following"}, "actor": {actor}, "profiles": {"true"}}.Encode(), &page)
	took := time.Since(start)
	out := map[string]string{}
	for _, p := range page.Profiles {
		desc := p.Handle + "|" + p.DisplayName
		if p.Value != nil && p.Value.DisplayName != p.DisplayName {
			t.Errorf("value and top level disagree: %+v", p)
		}
		out[p.DID] = desc
	}
	return out, took
}

func (n *network) pdsProfile(who, displayName string) {
	n.pds.AddRecord(syntax.DID(who), feeds.ProfileCollection, feeds.ProfileRKey,
		fmt.Sprintf(`{"$type":"app.bsky.actor.profile","displayName":%q}`, displayName))
}

func (n *network) hydrationConfig(t *testing.T, wait time.Duration) Config {
	cfg := n.config(t)
	cfg.Hydration.Profiles = true
	cfg.Hydration.FetchWait = wait
	return cfg
}

// The whole path: the profile collection is subscribed to, profiles on the
// stream are stored and served, missing ones are fetched from the PDS
// within the wait, deletes are applied.
func TestProfileHydration(t *testing.T) {
	n := newNetwork(t)
	alice, carol, dave := n.account("alice"), n.account("carol"), n.account("dave")
	n.pdsFollow(alice, carol, "3kfollowcarol")
	n.pdsFollow(alice, dave, "3kfollowdave2")
	base := time.Now().Add(-time.Hour)
	n.pdsPost(carol, rkeyAt(base), base)
	n.pdsPost(dave, rkeyAt(base.Add(time.Minute)), base.Add(time.Minute))
	n.pdsProfile(dave, "Dave on his PDS")
	td := startDaemon(t, n.js, n.hydrationConfig(t, 2*time.Second))
	if q := n.js.Queries(); !slices.Contains(q[len(q)-1]["wantedCollections"], "app.bsky.actor.profile") {
		t.Fatalf("subscribed with %v", q[len(q)-1])
	}

	// Carol's profile arrives on the stream: out of scope before alice's
	// first read, stored after it. Dave's is only on his PDS.
	now := time.Now().UnixMicro()
	n.js.Append(jetstreamtest.Profile(carol, now, "Carol"))
	td.waitCursor(t, now)
	td.feed(t, alice)
	n.js.Append(jetstreamtest.Profile(carol, now+1, "Carol"))
	td.waitCursor(t, now+1)
	got, _ := td.profiles(t, alice)
	want := map[string]string{carol: "carol.test|Carol", dave: "dave.test|Dave on his PDS"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("profiles = %v, want %v", got, want)
	}
	if n.pds.Requests(syntax.DID(carol), feeds.ProfileCollection) != 0 {
		t.Error("carol's profile was fetched although the stream delivered it")
	}

	// An update and a delete on the stream.
	n.js.Append(jetstreamtest.Profile(carol, now+2, "Carol B"), jetstreamtest.Delete("app.bsky.actor.profile", dave, "self", now+3))
	td.waitCursor(t, now+3)
	got, _ = td.profiles(t, alice)
	want = map[string]string{carol: "carol.test|Carol B", dave: "dave.test|"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after update and delete = %v, want %v", got, want)
	}
	if m := td.metrics(t); !strings.Contains(m, `appview_profiles_fetches_total{outcome="stored"} 1`) {
		t.Errorf("metrics lack the one stored fetch:\n%s", grepLines(m, "appview_profiles_"))
	}
}

// A slow PDS: the read answers within the wait without the profile; a
// later read has it.
func TestProfileHydrationSlowPDS(t *testing.T) {
	n := newNetwork(t)
	alice, carol := n.account("alice"), n.account("carol")
	n.pdsFollow(alice, carol, "3kfollowcarol")
	base := time.Now().Add(-time.Hour)
	n.pdsPost(carol, rkeyAt(base), base)
	n.pdsProfile(carol, "Carol")
	const wait = 100 * time.Millisecond
	td := startDaemon(t, n.js, n.hydrationConfig(t, wait))
	td.feed(t, alice)
	const slow = 3 * time.Second // seconds: scheduling noise is not taken for a wait
	n.pds.SetDelay(slow)
	n.pds.FailN(syntax.DID(carol), feeds.ProfileCollection, pdstest.FaultDelayed, 1)

	got, took := td.profiles(t, alice)
	// The handle is resolved by the same fetch, so it is missing too.
	if got[carol] != "|" {
		t.Fatalf("first read = %v", got)
	}
	if took >= slow {
		t.Fatalf("the read took %v: it waited for the slow PDS (%v) beyond fetch_wait %v", took, slow, wait)
	}
	deadline := time.Now().Add(slow + 10*time.Second)
	for got[carol] != "carol.test|Carol" {
		if time.Now().After(deadline) {
			t.Fatalf("later read = %v", got)
		}
		time.Sleep(20 * time.Millisecond)
		got, _ = td.profiles(t, alice)
	}
}

// Without hydration, profiles=true answers an empty list and the profile
// collection is not subscribed to; a bad value is a 400.
func TestProfileHydrationOff(t *testing.T) {
	n := newNetwork(t)
	alice := n.account("alice")
	td := startDaemon(t, n.js, n.config(t))
	if q := n.js.Queries(); slices.Contains(q[len(q)-1]["wantedCollections"], "app.bsky.actor.profile") {
		t.Fatalf("subscribed with %v", q[len(q)-1])
	}
	resp, err := http.Get(td.base + "/xrpc/com.example.appview.getFeed?feed=following&profiles=true&actor=" + alice)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != `{"records":[],"profiles":[]}`+"\n" {
		t.Fatalf("hydration off: %d %s", resp.StatusCode, body)
	}
	resp, err = http.Get(td.base + "/xrpc/com.example.appview.getFeed?feed=following&profiles=maybe&actor=" + alice)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"error":"InvalidRequest"`) {
		t.Fatalf("profiles=maybe: %d %s", resp.StatusCode, body)
	}
}

func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
