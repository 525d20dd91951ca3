package appview

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/directory/plctest"
	"github.com/atfeeds/appview/jetstream/jetstreamtest"
	"github.com/atfeeds/appview/pds/pdstest"
)

// network is a fake atproto network on loopback: PLC, one PDS, Jetstream.
type network struct {
	plc *plctest.Server
	pds *pdstest.Server
	js  *jetstreamtest.Server
}

func newNetwork(t *testing.T) *network {
	n := &network{plc: plctest.NewServer(), pds: pdstest.NewServer(), js: jetstreamtest.NewServer()}
	t.Cleanup(n.plc.Close)
	t.Cleanup(n.pds.Close)
	t.Cleanup(n.js.Close)
	return n
}

func (n *network) account(name string) string {
	d := user(name)
	n.plc.Add(syntax.DID(d), syntax.Handle(name+".test"), n.pds.URL())
	n.pds.AddRepo(syntax.DID(d))
	return d
}

// pdsPost stores a post on the PDS only (written before the daemon ran).
func (n *network) pdsPost(author string, rkey string, createdAt time.Time) {
	n.pds.AddRecord(syntax.DID(author), postNSID, syntax.RecordKey(rkey),
		fmt.Sprintf(`{"$type":"app.bsky.feed.post","text":"from the pds","createdAt":%q}`, createdAt.UTC().Format(time.RFC3339)))
}

func (n *network) pdsFollow(who, whom, rkey string) {
	n.pds.AddRecord(syntax.DID(who), followNSID, syntax.RecordKey(rkey),
		fmt.Sprintf(`{"$type":"app.bsky.graph.follow","subject":%q,"createdAt":"2026-01-01T00:00:00Z"}`, whom))
}

func (n *network) config(t *testing.T) Config {
	cfg := DefaultConfig()
	cfg.Database.Path = t.TempDir() + "/appview.db"
	cfg.Jetstream.URLs = []string{n.js.URL()}
	cfg.Ingest.BatchInterval = 5 * time.Millisecond
	cfg.Identity.PLCURL = n.plc.URL()
	cfg.Identity.HandleResolverURL = n.plc.URL()
	cfg.Identity.AllowPrivateNetworks = true
	cfg.Backfill.FirstReadWait = 10 * time.Second
	return cfg
}

// rkeyAt is a TID record key for a time, as a PDS would mint it.
func rkeyAt(ts time.Time) string { return string(syntax.NewTIDFromTime(ts, 0)) }

func (td *testDaemon) waitFeed(t *testing.T, actor string, want []string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := td.feed(t, actor)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("feed of %s = %v, want %v", actor, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestFirstReadThenLiveStream(t *testing.T) {
	n := newNetwork(t)
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	alice, carol, dave, erin := n.account("alice"), n.account("carol"), n.account("dave"), n.account("erin")
	n.pdsFollow(alice, carol, "3kfollowcarol")
	n.pdsFollow(alice, dave, "3kfollowdave2")
	c1, c2, d1 := rkeyAt(base.Add(1*time.Minute)), rkeyAt(base.Add(3*time.Minute)), rkeyAt(base.Add(2*time.Minute))
	n.pdsPost(carol, c1, base.Add(1*time.Minute))
	n.pdsPost(carol, c2, base.Add(3*time.Minute))
	n.pdsPost(dave, d1, base.Add(2*time.Minute))
	n.pdsPost(erin, rkeyAt(base.Add(4*time.Minute)), base.Add(4*time.Minute)) // alice does not follow erin

	td := startDaemon(t, n.js, n.config(t))
	// The first read, by handle, is full from the first page.
	if got, want := td.feed(t, "alice.test"), []string{c2, d1, c1}; !slices.Equal(got, want) {
		t.Fatalf("first read = %v, want %v", got, want)
	}

	// Live: a followee's post arrives; a stranger's is skipped and counted.
	now := time.Now().UnixMicro()
	n.js.Append(
		jetstreamtest.Post(carol, "3livecarol222", now, "live"),
		jetstreamtest.Post(user("stranger"), "3livestrange2", now+1, "nobody reads me"),
	)
	td.waitCursor(t, now+1)
	if got, want := td.feed(t, alice), []string{"3livecarol222", c2, d1, c1}; !slices.Equal(got, want) {
		t.Fatalf("after live post = %v, want %v", got, want)
	}
	if m := td.metrics(t); !strings.Contains(m, `appview_ingest_changes_total{outcome="out_of_scope"} 1`) {
		t.Errorf("stranger's post not counted as out of scope")
	}

	// Alice follows erin on the live stream: erin's backlog is fetched
	// from her PDS and merged.
	n.js.Append(jetstreamtest.Follow(followNSID, alice, "3kfollowerin2", erin, now+2))
	td.waitFeed(t, alice, []string{"3livecarol222", rkeyAt(base.Add(4 * time.Minute)), c2, d1, c1})

	// Carol is deactivated: her items go; reactivated: they come back.
	n.js.Append([]byte(fmt.Sprintf(`{"did":%q,"time_us":%d,"kind":"account","account":{"active":false,"status":"deactivated","did":%q,"seq":1,"time":"2026-01-01T00:00:00Z"}}`, carol, now+3, carol)))
	td.waitFeed(t, alice, []string{rkeyAt(base.Add(4 * time.Minute)), d1})
	n.js.Append([]byte(fmt.Sprintf(`{"did":%q,"time_us":%d,"kind":"account","account":{"active":true,"did":%q,"seq":2,"time":"2026-01-01T00:00:00Z"}}`, carol, now+4, carol)))
	td.waitFeed(t, alice, []string{"3livecarol222", rkeyAt(base.Add(4 * time.Minute)), c2, d1, c1})
}

func TestUnknownHandleIsActorNotFound(t *testing.T) {
	n := newNetwork(t)
	td := startDaemon(t, n.js, n.config(t))
	resp, err := httpGet(td.base + "/xrpc/com.example.appview.getFeed?feed=following&actor=nobody.test")
	if err != nil {
		t.Fatal(err)
	}
	if resp.status != 400 || !strings.Contains(resp.body, `"error":"ActorNotFound"`) {
		t.Errorf("got %d %s, want 400 ActorNotFound", resp.status, resp.body)
	}
}
