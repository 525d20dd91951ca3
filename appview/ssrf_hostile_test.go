package appview

import (
	"context"
	"database/sql"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/backfill"
	"github.com/atfeeds/appview/directory"
	"github.com/atfeeds/appview/directory/plctest"
	"github.com/atfeeds/appview/egress"
	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/pds"
	"github.com/atfeeds/appview/pds/pdstest"
)

// SSRF: a stranger's DID document names the PDS the appview will call.
// With identity.allow_private_networks off, one that points at loopback,
// private or link-local addresses, or at a name that resolves to one, is
// refused, and the refusal is recorded on the viewer, its listing and
// sync_runs.
//
// The daemon uses one egress client for the PLC directory and the PDSes,
// so with the setting off it cannot reach a fake PLC on loopback either
// (TestDaemonRefusesLoopbackIdentity shows that). The document cases are
// therefore tested one level down, with the daemon's parts wired as
// buildBackfill wires them except that the PLC is reached through a plain
// transport: the directory's PDS check and the PDS client's egress guard
// are the production ones.

// ssrfWorld is the first-read machinery with private networks refused.
type ssrfWorld struct {
	plc   *plctest.Server
	pds   *pdstest.Server // a live PDS on loopback: the internal service
	store *feeds.Store
	path  string
	svc   *backfill.Service
}

func newSSRFWorld(t *testing.T, allowPrivate bool) *ssrfWorld {
	t.Helper()
	w := &ssrfWorld{plc: plctest.NewServer(), pds: pdstest.NewServer(), path: t.TempDir() + "/appview.db"}
	t.Cleanup(w.plc.Close)
	t.Cleanup(w.pds.Close)
	st, err := feeds.Open(context.Background(), feeds.Options{
		Path: w.path,
		Feeds: []feeds.Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 100,
			Targets: []feeds.Target{{Collection: postNSID, Cap: 200}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	w.store = st
	// The operator's PLC, trusted, on loopback for the test.
	plcClient := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	dir := directory.New(directory.Config{
		PLCURL: w.plc.URL(), HTTPClient: plcClient,
		AllowPrivateNetworks: allowPrivate, SkipHandleVerification: true,
	})
	strangers := egress.NewClient(egress.Options{AllowPrivateNetworks: allowPrivate, Timeout: 5 * time.Second})
	w.svc = backfill.New(backfill.Config{FirstReadWait: 10 * time.Second}, st, dir,
		pds.NewClient(strangers, pds.Options{Timeout: 5 * time.Second}),
		[]backfill.Feed{{Name: "following", FollowCollection: followNSID, Targets: []syntax.NSID{postNSID}}},
		nil, nil)
	return w
}

// viewer registers did with a document naming pdsURL and gives it a
// follow on the live PDS, which a first read would fetch if it could.
func (w *ssrfWorld) viewer(did, pdsURL string) syntax.DID {
	w.plc.SetDocument(syntax.DID(did), plctest.Document(syntax.DID(did), "", pdsURL))
	w.pds.AddRecord(syntax.DID(did), followNSID, "3kfollowcarol",
		`{"$type":"app.bsky.graph.follow","subject":"did:plc:carol","createdAt":"2026-01-01T00:00:00Z"}`)
	return syntax.DID(did)
}

type syncRun struct{ kind, outcome, err string }

func (w *ssrfWorld) syncRuns(t *testing.T, subject syntax.DID) []syncRun {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+w.path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT kind, outcome, error FROM sync_runs WHERE subject = ? ORDER BY id`, string(subject))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []syncRun
	for rows.Next() {
		var r syncRun
		if err := rows.Scan(&r.kind, &r.outcome, &r.err); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// loopbackName finds a host name other than "localhost" that resolves
// only to loopback addresses here (the machine's own name usually does,
// through /etc/hosts), or "".
func loopbackName() string {
	host, err := os.Hostname()
	if err != nil || host == "" || strings.EqualFold(host, "localhost") {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return ""
	}
	for _, a := range addrs {
		if !a.Unmap().IsLoopback() {
			return ""
		}
	}
	return host
}

func TestSSRFDocumentsAreRefused(t *testing.T) {
	w := newSSRFWorld(t, false)
	pdsURL, err := url.Parse(w.pds.URL())
	if err != nil {
		t.Fatal(err)
	}
	port := pdsURL.Port()
	tests := []struct {
		name, did, endpoint, reason string
	}{
		{"loopback IPv4", "did:plc:ssrfloopback4", "http://127.0.0.1:" + port, "loopback"},
		{"loopback IPv4, other address", "did:plc:ssrfloopback42", "http://127.0.0.2:" + port, "loopback"},
		{"loopback IPv6", "did:plc:ssrfloopback6", "http://[::1]:" + port, "loopback"},
		{"IPv4-mapped loopback", "did:plc:ssrfmapped", "http://[::ffff:127.0.0.1]:" + port, "loopback"},
		{"unspecified", "did:plc:ssrfunspecified", "http://0.0.0.0:" + port, "unspecified"},
		{"private 10/8", "did:plc:ssrfprivate10", "http://10.0.0.1", "private"},
		{"private 192.168/16", "did:plc:ssrfprivate192", "https://192.168.1.1", "private"},
		{"cloud metadata", "did:plc:ssrfmetadata", "http://169.254.169.254", "link-local"},
		{"localhost", "did:plc:ssrflocalhost", "http://localhost:" + port, "loopback"},
		{"LOCALHOST.", "did:plc:ssrflocalhostdot", "http://LOCALHOST.:" + port, "loopback"},
		{"a .localhost name", "did:plc:ssrfsublocalhost", "http://pds.localhost:" + port, "loopback"},
	}
	if name := loopbackName(); name != "" {
		// Passes the document check (it is just a name, over https as
		// a public endpoint must be); refused by the egress dialer on
		// the address it resolves to, at connect time, before TLS.
		tests = append(tests, struct{ name, did, endpoint, reason string }{
			"name resolving to loopback (" + name + ")", "did:plc:ssrfhostname", "https://" + name + ":" + port, "loopback",
		})
	} else {
		t.Log("no host name other than localhost resolves to loopback here; that case is not run")
	}
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			viewer := w.viewer(tt.did, tt.endpoint)
			// One client per case: the per-client bucket is not under test.
			if err := w.svc.Ensure(ctx, viewer, "following", tt.did); err != nil {
				t.Fatalf("ensure: %v", err)
			}
			st, err := w.store.RegisterViewer(ctx, viewer, "following", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if st.Complete || st.Attempts != 1 || !strings.Contains(st.LastError, tt.reason) {
				t.Errorf("viewer state %+v, want a failed first read naming %q", st, tt.reason)
			}
			l, err := w.store.ReadListing(ctx, viewer, followNSID)
			if err != nil {
				t.Fatal(err)
			}
			if l.Complete || !strings.Contains(l.LastError, tt.reason) {
				t.Errorf("listing %+v, want an error naming %q", l, tt.reason)
			}
			runs := w.syncRuns(t, viewer)
			if len(runs) != 1 || runs[0].kind != "follows" || runs[0].outcome != "error" || !strings.Contains(runs[0].err, tt.reason) {
				t.Errorf("sync_runs %+v, want one failed follows run naming %q", runs, tt.reason)
			}
			t.Logf("recorded: %s", runs[0].err)
		})
	}
	if n := w.pds.TotalRequests(); n != 0 {
		t.Errorf("the internal PDS was reached %d times", n)
	}
}

// TestSSRFControl: the same world with private networks allowed does
// reach the loopback PDS, so the refusals above come from the guard.
func TestSSRFControl(t *testing.T) {
	w := newSSRFWorld(t, true)
	viewer := w.viewer("did:plc:ssrfcontrol", w.pds.URL())
	ctx := context.Background()
	if err := w.svc.Ensure(ctx, viewer, "following", "192.0.2.7"); err != nil {
		t.Fatal(err)
	}
	st, err := w.store.RegisterViewer(ctx, viewer, "following", time.Now())
	if err != nil || !st.Complete {
		t.Fatalf("viewer state %+v, %v: want a complete first read", st, err)
	}
	if w.pds.TotalRequests() == 0 {
		t.Error("the PDS was not reached")
	}
	if runs := w.syncRuns(t, viewer); len(runs) != 1 || runs[0].outcome != "ok" {
		t.Errorf("sync_runs %+v", runs)
	}
}

// TestDaemonRefusesLoopbackIdentity: the whole daemon with
// allow_private_networks off, pointed at a PLC on loopback, refuses to
// reach it; the first read fails with the reason recorded, getFeed still
// answers (an empty feed), and the PDS is never asked.
func TestDaemonRefusesLoopbackIdentity(t *testing.T) {
	n := newNetwork(t)
	alice := n.account("alice")
	n.pdsFollow(alice, user("carol"), "3kfollowcarol")
	cfg := n.config(t)
	cfg.Identity.AllowPrivateNetworks = false
	td := startDaemon(t, n.js, cfg)
	var page feedResponse
	td.getJSON(t, getFeedPath+"?feed=following&actor="+alice, &page)
	if len(page.Records) != 0 {
		t.Errorf("feed %+v, want empty", page)
	}
	ctx := context.Background()
	st, err := td.Store().RegisterViewer(ctx, syntax.DID(alice), "following", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if st.Complete || !strings.Contains(st.LastError, "loopback") || !strings.Contains(st.LastError, "forbidden address") {
		t.Errorf("viewer state %+v, want a first read refused for a loopback address", st)
	}
	if n.plc.Requests() != 0 || n.pds.TotalRequests() != 0 {
		t.Errorf("PLC asked %d times, PDS %d times; want neither", n.plc.Requests(), n.pds.TotalRequests())
	}
	// The handle resolver is on loopback too and refused like the PLC: the
	// directory cannot answer, which says nothing about whether the actor
	// exists, so 502 rather than ActorNotFound.
	if resp, err := httpGet(td.base + getFeedPath + "?feed=following&actor=alice.test"); err != nil || resp.status != 502 ||
		!strings.Contains(resp.body, "UpstreamFailure") {
		t.Errorf("handle actor: %+v %v, want 502 UpstreamFailure (the resolver is on loopback too)", resp, err)
	}
	if n.plc.HandleRequests() != 0 {
		t.Errorf("handle resolver asked %d times, want never", n.plc.HandleRequests())
	}
}
