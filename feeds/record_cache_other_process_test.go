package feeds

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"testing"
)

// Operator commands (appview backfill, rebuild, migrate) write to the file
// while the daemon runs, from processes of their own. Their commits never
// pass the daemon's writer, so the daemon's record cache cannot hear of
// the records they change; the writer notices another connection's commit
// (PRAGMA data_version) at its next transaction or idle tick and forgets
// every record. The counter is per connection, so a writer connection
// database/sql replaced in between (writer_conn.go) forgets them too: its
// first value cannot tell (a review found the new connection's value
// equal to the old one's).
//
// "after a restart" is a daemon that opens the file and serves pages
// before its writer's first transaction or idle tick: the edit in that
// window must still reach the page (found by a review: the first reading
// was taken as the baseline, so the edit was never noticed and the old
// body served until evicted; the baseline is now read at Open).
func TestTheRecordCacheForgetsWhatAnotherProcessChanged(t *testing.T) {
	for _, tc := range []struct {
		notice  string
		restart bool
	}{
		{"next batch", false},
		{"idle tick", false},
		{"next batch on a new writer connection", false},
		{"next batch", true},
		{"idle tick", true},
	} {
		name := tc.notice
		if tc.restart {
			name += " after a restart"
		}
		t.Run(name, func(t *testing.T) {
			path := t.TempDir() + "/appview.db"
			cached := Options{Path: path, Feeds: defaultFeeds, IndexAll: true, RecordCacheMB: 4}
			daemon := mustOpenWith(t, cached)
			apply(t, daemon, follow("alice", "carol", "f1", 1), post("carol", "p1", 10))
			if tc.restart {
				if err := daemon.Close(); err != nil {
					t.Fatal(err)
				}
				daemon = mustOpenWith(t, cached) // serves p1 before it writes anything
			}
			if items := firstPage(t, daemon, "alice"); len(items) != 1 || items[0].CID != "bafypostp1" {
				t.Fatalf("first page %+v, want p1 (now cached)", items)
			}

			// Another process edits p1: an operator's backfill, say.
			other := mustOpenWith(t, Options{Path: path, Feeds: defaultFeeds, IndexAll: true})
			upd := post("carol", "p1", 20)
			upd.Op, upd.CID, upd.Record = OpUpdate, "bafyedited", json.RawMessage(`{"$type":"app.bsky.feed.post","text":"edited"}`)
			apply(t, other, upd)

			switch tc.notice {
			case "next batch":
				apply(t, daemon, post("dave", "x", 30))
			case "idle tick":
				if _, err := daemon.SweepTick(context.Background(), Tick{}); err != nil {
					t.Fatal(err)
				}
			case "next batch on a new writer connection":
				conn, err := daemon.writer.Conn(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				conn.Raw(func(any) error { return driver.ErrBadConn }) // the pool drops it
				conn.Close()
				apply(t, daemon, post("dave", "x", 30))
			}
			items := firstPage(t, daemon, "alice")
			if len(items) != 1 || items[0].CID != "bafyedited" || string(items[0].Value) != string(upd.Record) {
				t.Fatalf("page after another process edited p1: %+v, want the edit", items)
			}
		})
	}
}
