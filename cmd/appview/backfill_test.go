package main

import (
	"context"
	"fmt"
	"github.com/atfeeds/appview/internal/syncbuf"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/directory/plctest"
	"github.com/atfeeds/appview/pds/pdstest"
)

const (
	followNSID = syntax.NSID("app.bsky.graph.follow")
	postNSID   = syntax.NSID("app.bsky.feed.post")
)

// gatedPDS stands a fake PDS behind a gate on loopback: it records the
// cursor of every listRecords request, and can hang the nth request of
// one (repo, collection) until the client gives up: a PDS that blocks
// after n-1 pages, for an interruption that lands mid-listing.
type gatedPDS struct {
	*pdstest.Server
	srv *httptest.Server

	mu      sync.Mutex
	cursors map[string][]string // "repo collection" → the cursors asked for, in order
	hangKey string
	hangAt  int
	hung    chan struct{}
}

func newGatedPDS(t *testing.T) *gatedPDS {
	g := &gatedPDS{Server: pdstest.NewServer(), cursors: map[string][]string{}, hung: make(chan struct{})}
	target, _ := url.Parse(g.Server.URL())
	proxy := httputil.NewSingleHostReverseProxy(target)
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		key := q.Get("repo") + " " + q.Get("collection")
		g.mu.Lock()
		g.cursors[key] = append(g.cursors[key], q.Get("cursor"))
		hang := key == g.hangKey && len(g.cursors[key]) == g.hangAt
		g.mu.Unlock()
		if hang {
			close(g.hung)
			<-r.Context().Done()
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { g.srv.Close(); g.Server.Close() })
	return g
}

func (g *gatedPDS) URL() string { return g.srv.URL }

func (g *gatedPDS) hangOn(repo syntax.DID, coll syntax.NSID, n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hangKey, g.hangAt = string(repo)+" "+string(coll), n
}

func (g *gatedPDS) asked(repo syntax.DID, coll syntax.NSID) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.cursors[string(repo)+" "+string(coll)]...)
}

// tidAt is a record key minted n seconds into 2026.
func tidAt(n int) syntax.RecordKey {
	return syntax.RecordKey(syntax.NewTIDFromTime(time.Date(2026, 1, 1, 0, 0, n, 0, time.UTC), 0))
}

// backfillWorld: alice (alice.test) follows bob, carol and dave through
// 250 follow records (three pages of a listing), and each of them has two
// posts.
func backfillWorld(t *testing.T) (env []string, pds *gatedPDS, alice syntax.DID) {
	plc := plctest.NewServer()
	t.Cleanup(plc.Close)
	pds = newGatedPDS(t)
	add := func(name string) syntax.DID {
		d := syntax.DID("did:plc:" + name)
		plc.Add(d, syntax.Handle(name+".test"), pds.URL())
		pds.AddRepo(d)
		return d
	}
	alice = add("alice")
	followees := []syntax.DID{add("bob"), add("carol"), add("dave")}
	for i := range 250 {
		pds.AddRecord(alice, followNSID, tidAt(i), fmt.Sprintf(
			`{"$type":"app.bsky.graph.follow","subject":%q,"createdAt":"2026-01-01T00:00:00Z"}`, followees[i%3]))
	}
	for i, f := range followees {
		for j := range 2 {
			n := 1000 + 10*i + j
			pds.AddRecord(f, postNSID, tidAt(n), fmt.Sprintf(
				`{"$type":"app.bsky.feed.post","text":"post %d","createdAt":"2026-01-01T00:30:00Z"}`, n))
		}
	}
	env = []string{
		"APPVIEW_DATABASE_PATH=" + t.TempDir() + "/appview.db",
		"APPVIEW_IDENTITY_PLC_URL=" + plc.URL(),
		"APPVIEW_IDENTITY_HANDLE_RESOLVER_URL=" + plc.URL(),
		"APPVIEW_IDENTITY_ALLOW_PRIVATE_NETWORKS=true",
	}
	return env, pds, alice
}

// An interrupted backfill resumes from the page cursor it committed: the
// second run asks the PDS for the third page of alice's follows only.
func TestBackfillInterruptedAndResumed(t *testing.T) {
	env, pds, alice := backfillWorld(t)
	pds.hangOn(alice, followNSID, 3) // pages 1 and 2 answer, page 3 hangs

	ctx, cancel := context.WithCancel(context.Background())
	var stderr syncbuf.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"backfill", "--actor", "alice.test"}, env, new(syncbuf.Buffer), &stderr)
	}()
	select {
	case <-pds.hung:
	case <-time.After(10 * time.Second):
		t.Fatal("the backfill never reached the third page")
	}
	cancel() // what SIGINT does in main
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the backfill did not stop when interrupted")
	}
	if err == nil || !strings.Contains(err.Error(), "interrupted; run the same command again to resume") {
		t.Fatalf("interrupted backfill: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), `msg="first read" actor=did:plc:alice feed=following`) {
		t.Errorf("the run did not say what it started:\n%s", stderr.String())
	}
	out, _, err := runCmd(t, env, "cursor", "show")
	if err != nil || !strings.Contains(out, "following: 1 viewers, 0 items") {
		t.Fatalf("after the interruption:\n%s%v", out, err)
	}
	asked := pds.asked(alice, followNSID)
	if len(asked) != 3 || asked[0] != "" || asked[2] == "" {
		t.Fatalf("first run asked for follow pages %q", asked)
	}

	out, logs, err := runCmd(t, env, "backfill", "--actor", "did:plc:alice", "--feed", "following")
	if err != nil {
		t.Fatalf("resumed backfill: %v\n%s", err, logs)
	}
	if want := "did:plc:alice following: first read complete, 6 feed items\n"; out != want {
		t.Errorf("resumed backfill printed %q, want %q", out, want)
	}
	// The resumed run asks for the third page again, then for the empty
	// page that confirms the end of the listing.
	asked = pds.asked(alice, followNSID)
	if len(asked) != 5 || asked[3] != asked[2] || asked[4] == asked[3] {
		t.Errorf("follow pages asked for over both runs: %q; want the resumed run to go on from the third page's cursor", asked)
	}
	// Not a terminal: log lines, the last one saying it is done.
	if !strings.Contains(logs, `msg=progress task="backfill following" state=done done=3 total=3`) {
		t.Errorf("progress log lacks the final line:\n%s", logs)
	}
	out, _, err = runCmd(t, env, "cursor", "show")
	if err != nil || !strings.Contains(out, "following: 1 viewers, 6 items") {
		t.Errorf("after the resumed backfill:\n%s%v", out, err)
	}
	out, _, err = runCmd(t, env, "backfill", "--actor", "alice.test")
	if err != nil || out != "did:plc:alice following: already complete\n" {
		t.Errorf("third run: %q %v", out, err)
	}
}

func TestBackfillRejectsBadInput(t *testing.T) {
	env, _, _ := backfillWorld(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"backfill"}, "--actor is required"},
		{[]string{"backfill", "--actor", "not a handle!"}, `actor "not a handle!": not a DID or handle`},
		{[]string{"backfill", "--actor", "did:plc:nobody"}, "resolve actor did:plc:nobody"},
		{[]string{"backfill", "--actor", "nobody.test"}, "resolve actor nobody.test"},
		{[]string{"backfill", "--actor", "alice.test", "--feed", "nope"}, `unknown feed "nope" (configured: following)`},
		{[]string{"backfill", "--actor", "alice.test", "extra"}, `unexpected argument "extra"`},
	} {
		_, _, err := runCmd(t, env, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

// A mistyped actor leaves no database behind: backfill creates a missing
// file (a first read by hand may be the first thing run on it), and a
// typo in a directory with none used to leave an empty one, which later
// commands then read as an empty store instead of saying there is none.
func TestABackfillOfAMistypedActorCreatesNothing(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	env := []string{"APPVIEW_DATABASE_PATH=" + path}
	if _, _, err := runCmd(t, env, "backfill", "--actor", "not a handle!"); err == nil || !strings.Contains(err.Error(), "not a DID or handle") {
		t.Fatalf("backfill of a mistyped actor: %v", err)
	}
	if _, err := os.Stat(path); err == nil {
		t.Fatalf("a backfill of a mistyped actor created %s", path)
	}
}
