package appview

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/atfeeds/appview/jetstream/jetstreamtest"
)

// A malformed frame (dropped as bad_did, counted) stamped 4 min past the
// local clock, inside the skew a valid frame is allowed, used to become
// the stored cursor: every later batch's cursor was refused as older, and
// a restart asked the server for a cursor minutes ahead of every real
// event, so what was sent while the daemon was down was skipped with no
// gap recorded. (Found by a review.)
func TestAMalformedFrameStampedAheadIsNotTheStoredCursor(t *testing.T) {
	js := jetstreamtest.NewServer()
	defer js.Close()
	cfg := testConfig(t, js, t.TempDir()+"/appview.db")
	td := startDaemon(t, js, cfg)

	now := time.Now().UnixMicro()
	ahead := now + 4*60*1_000_000
	js.Append(
		jetstreamtest.Follow(followNSID, user("alice"), "f1", user("carol"), now-2_000_000),
		[]byte(fmt.Sprintf(`{"did":"not-a-did","time_us":%d,"kind":"commit"}`, ahead)),
		jetstreamtest.Post(user("carol"), "p1", now-1_000_000, "after the junk"),
	)
	td.waitCursor(t, now-1_000_000)
	td.stop()

	startDaemon(t, js, cfg)
	qs := js.Queries()
	cursor, _ := strconv.ParseInt(qs[len(qs)-1].Get("cursor"), 10, 64)
	if newest := now - 1_000_000; cursor > newest {
		t.Errorf("restart asked for cursor %d, %v past the newest real event (%d): a dropped frame chose it",
			cursor, time.Duration(cursor-newest)*time.Microsecond, newest)
	}
}
