package appview

import (
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/jetstream/jetstreamtest"
	"github.com/atfeeds/appview/pds/pdstest"
	"github.com/atfeeds/appview/xrpc"
)

// A PDS host that answered 429 to one of the daemon's services is asked
// by none of them until its pause ends: the backfill, the profile
// fetcher and notifyOfUpdate share one pds.HostPauses. Each kept its
// own, so once the backfill met the host's limit, the fetcher and
// notifyOfUpdate each still sent the host a request of their own.
func TestAHostRateLimitingOneServiceIsPausedForAll(t *testing.T) {
	n := newNetwork(t)
	alice, carol, erin := n.account("alice"), n.account("carol"), n.account("erin")
	n.pdsFollow(alice, carol, "3kfollowcarol")
	base := time.Now().Add(-time.Hour)
	n.pdsPost(carol, rkeyAt(base), base)
	n.pdsProfile(carol, "Carol")
	cfg := n.hydrationConfig(t, 2*time.Second)
	cfg.Notify = NotifyConfig{Enabled: true, Secret: testNotifySecret}
	td := startDaemon(t, n.js, cfg)
	if got := td.feed(t, alice); len(got) != 1 { // the first read: alice is a viewer
		t.Fatalf("first read = %v", got)
	}

	// The backfill meets the host's limit: alice follows erin on the
	// stream, and the listing of erin's backlog is answered 429 with
	// Retry-After: 7.
	n.pds.FailN(syntax.DID(erin), postNSID, pdstest.FaultRateLimited, 1)
	start := time.Now()
	n.js.Append(jetstreamtest.Follow(followNSID, alice, "3kfollowerin2", erin, start.UnixMicro()))
	const limited = `appview_backfill_pds_requests_total{outcome="rate_limited"}`
	for td.metricValue(t, limited) < 1 {
		if time.Since(start) > 5*time.Second {
			t.Fatal("the backfill did not meet the host's 429")
		}
		time.Sleep(5 * time.Millisecond)
	}

	// Within the pause, neither the profile fetcher nor notifyOfUpdate
	// asks the host.
	profiles, _ := td.profiles(t, alice)
	rk := rkeyAt(time.Now())
	n.pdsText(carol, rk, "hello")
	postsBefore := n.pds.Requests(syntax.DID(carol), postNSID)
	res := td.notify(t, postURI(carol, rk))
	if took := time.Since(start); took > 6*time.Second {
		t.Skipf("the reads took %v, too close to the host's 7s pause to tell", took)
	}
	if got := n.pds.Requests(syntax.DID(carol), feeds.ProfileCollection); got != 0 {
		t.Errorf("the profile fetcher asked the paused host %d times (profiles %v)", got, profiles)
	}
	if got := n.pds.Requests(syntax.DID(carol), postNSID) - postsBefore; got != 0 {
		t.Errorf("notifyOfUpdate asked the paused host %d times (%+v)", got, res)
	}
	if errorNames(res)[postURI(carol, rk)] != xrpc.NotifyErrUpstreamFailure {
		t.Errorf("notify within the pause: %+v, want %s", res, xrpc.NotifyErrUpstreamFailure)
	}
	if got := td.metricValue(t, `appview_profiles_fetches_total{outcome="host_paused"}`); got != 1 {
		t.Errorf("host_paused profile fetches = %v, want 1", got)
	}
}
