package feeds

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A backlog's batches let the WAL grow to walBacklogFactor times its live
// threshold before a commit checkpoints it, and the RESTART guard waits as
// long; the first live batch after them checkpoints it.
func TestABacklogLetsTheWALGrowPastItsLiveThreshold(t *testing.T) {
	const walPages = 64
	path := t.TempDir() + "/appview.db"
	m := NewMetrics(prometheus.NewRegistry())
	s := mustOpenWith(t, Options{Path: path, Feeds: defaultFeeds, IndexAll: true, WALPages: walPages, Metrics: m})
	// Posts of about a page each: a batch of them writes that many pages.
	body := strings.Repeat("x", 3500)
	n := int64(0)
	posts := func(count int) []Change {
		var cs []Change
		for range count {
			n++
			c := post("alice", fmt.Sprintf("p%d", n), n)
			c.Record = json.RawMessage(fmt.Sprintf(`{"$type":"app.bsky.feed.post","text":%q}`, body))
			cs = append(cs, c)
		}
		return cs
	}
	applyAs := func(backlog bool, changes []Change) {
		t.Helper()
		b := &Batch{Changes: changes, Cursor: StreamCursor{TimeUS: n}, Backlog: backlog}
		if _, err := s.ApplyBatch(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	fileSize := func(name string) int64 {
		t.Helper()
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	dbSize := func() int64 { return fileSize(path) }
	// Two batches of 80 pages or so: past the live RESTART bound (128
	// frames) together, under the backlog's checkpoint (256).
	before := dbSize()
	applyAs(true, posts(80))
	applyAs(true, posts(80))
	if held, _, err := walHolds(path+"-wal", 2*walPages+1); err != nil || !held {
		t.Fatalf("after the backlog the WAL holds fewer than %d frames (%v): it was checkpointed or restarted", 2*walPages+1, err)
	}
	if after := dbSize(); after != before {
		t.Errorf("a backlog's batches under four times the threshold were checkpointed: the database file went from %d to %d bytes", before, after)
	}
	if got := testutil.ToFloat64(m.walRestarts); got != 0 {
		t.Errorf("%v RESTART checkpoints during the backlog, want none under four times the live bound", got)
	}
	// The next live batch is past the live threshold: its commit
	// checkpoints what the backlog left.
	applyAs(false, posts(1))
	if after := dbSize(); after <= before {
		t.Errorf("the first live batch after a backlog did not checkpoint it: the database file stayed at %d bytes", after)
	}
	// The WAL file the backlog grew past the live size limit is cut back
	// to it when the WAL next rewinds, at the next live write.
	walSize := func() int64 { return fileSize(path + "-wal") }
	if size := walSize(); size <= walSizeLimit(walPages) {
		t.Fatalf("setup: the backlog left a WAL file of %d bytes, want past the live limit %d", size, walSizeLimit(walPages))
	}
	applyAs(false, posts(1))
	if size := walSize(); size > walSizeLimit(walPages) {
		t.Errorf("after a live batch the WAL file is %d bytes, want cut back to %d", size, walSizeLimit(walPages))
	}
}
