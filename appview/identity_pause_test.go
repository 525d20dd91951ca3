package appview

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/atfeeds/appview/directory"
)

// A pause the PLC directory or the handle resolver asks for is counted
// by service, with no URL or DID in the labels, and logged once.
func TestIdentityPausesAreCountedAndLogged(t *testing.T) {
	reg := prometheus.NewRegistry()
	var logs bytes.Buffer
	onPause := identityPauses(reg, slog.New(slog.NewTextHandler(&logs, nil)))
	onPause(directory.ServicePLC, 429, 7*time.Second)
	onPause(directory.ServicePLC, 503, 5*time.Second)
	onPause(directory.ServiceHandleResolver, 429, time.Minute)
	want := `
# HELP appview_identity_pauses_total Pauses of identity lookups asked for by a 429 or 503 of the PLC directory or the handle resolver, by service (plc, handle_resolver).
# TYPE appview_identity_pauses_total counter
appview_identity_pauses_total{service="handle_resolver"} 1
appview_identity_pauses_total{service="plc"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "appview_identity_pauses_total"); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "identity lookups paused"); n != 3 {
		t.Fatalf("%d log lines, want one a pause:\n%s", n, logs.String())
	}
}

// The daemon wired end to end: a PLC 429 pauses identity lookups. A
// getFeed by handle meanwhile is a 503 with Retry-After; a first read by
// DID is deferred without asking the PLC, served what is stored, and
// reads in full once the pause is over; the pause is counted.
func TestAPLCRateLimitDefersFirstReadsUntilItsPauseEnds(t *testing.T) {
	n := newNetwork(t)
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	alice, carol := n.account("alice"), n.account("carol")
	n.pdsFollow(alice, carol, "3kfollowcarol")
	post := rkeyAt(base.Add(time.Minute))
	n.pdsPost(carol, post, base.Add(time.Minute))
	td := startDaemon(t, n.js, n.config(t))

	n.plc.LimitDocuments(1, "1")
	resp, err := httpGet(td.base + "/xrpc/com.example.appview.getFeed?feed=following&actor=alice.test")
	if err != nil {
		t.Fatal(err)
	}
	if resp.status != http.StatusServiceUnavailable || !strings.Contains(resp.body, `"error":"NotEnoughResources"`) {
		t.Fatalf("getFeed by handle with the PLC limiting: %d %s, want 503 NotEnoughResources", resp.status, resp.body)
	}
	if got := td.feed(t, alice); len(got) != 0 {
		t.Fatalf("a first read during the pause read %v", got)
	}
	if n := n.plc.RequestsFor(syntax.DID(alice)); n != 1 {
		t.Fatalf("the PLC was asked for alice %d times during its pause, want only the 429's", n)
	}
	if m := td.metrics(t); !strings.Contains(m, `appview_identity_pauses_total{service="plc"} 1`) {
		t.Errorf("the pause was not counted once")
	}

	time.Sleep(time.Second) // the pause, and the first read's deferral
	td.waitFeed(t, alice, []string{post})
}
