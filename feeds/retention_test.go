package feeds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/internal/writelock"
)

const hourUS = int64(time.Hour / time.Microsecond)

func storedRKeys(tb testing.TB, s *Store, table string) []string {
	tb.Helper()
	rows, err := s.writer.Query(`SELECT rkey FROM ` + table + ` ORDER BY rkey`)
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			tb.Fatal(err)
		}
		out = append(out, k)
	}
	return out
}

func TestRetentionRetiresOnlyUnreferencedOldRecordsAndOldTombstones(t *testing.T) {
	s := openSweep(t, t.TempDir()+"/appview.db", defaultFeeds,
		SweepOptions{Retention: time.Hour, TombstoneWindow: 2 * time.Hour})
	apply(t, s,
		follow("v", "alice", "f", 1),
		post("alice", "held", 2),            // old, but in v's feed
		post("bob", "orphan-old", 3),        // old, in no feed
		post("bob", "orphan-new", 3*hourUS), // in no feed, inside the window
		unpost("carol", "del-old", 4),
		unpost("carol", "del-new", 3*hourUS),
	)
	// Complete listings of both authors' posts (the backfill state).
	mustExec(t, s, `INSERT INTO listings (actor_id, collection_id, complete)
		SELECT id, ?, 1 FROM actors WHERE did IN (?, ?)`, s.targetColls[postNSID], string(did("alice")), string(did("bob")))
	// Event time moves to 3.5 h: records before 2.5 h and tombstones
	// before 1.5 h are past their windows. The wall clock plays no part.
	apply(t, s, post("bob", "late", 3*hourUS+hourUS/2))
	r := tick(t, s, t0.Add(1000*time.Hour), false)
	if r.RecordsRetired != 1 || r.TombstonesRetired != 1 {
		t.Fatalf("retired %d records, %d tombstones; want 1 and 1", r.RecordsRetired, r.TombstonesRetired)
	}
	if got, want := storedRKeys(t, s, "records"), []string{"held", "late", "orphan-new"}; !slices.Equal(got, want) {
		t.Fatalf("records = %v, want %v", got, want)
	}
	if got, want := storedRKeys(t, s, "tombstones"), []string{"del-new"}; !slices.Equal(got, want) {
		t.Fatalf("tombstones = %v, want %v", got, want)
	}
	// Bob's listing no longer matches what is stored: it is fetched again
	// when a viewer needs it. Alice lost nothing.
	complete := func(name string) int {
		return querySQL[int](t, s, `SELECT complete FROM listings WHERE actor_id = (SELECT id FROM actors WHERE did = ?)`, string(did(name)))
	}
	if complete("bob") != 0 || complete("alice") != 1 {
		t.Fatalf("listings complete: bob %d, alice %d; want 0 and 1", complete("bob"), complete("alice"))
	}
	// Idle: event time stands still, so nothing more can age out.
	if r := tick(t, s, t0.Add(1001*time.Hour), false); r.RecordsRetired != 0 || r.TombstonesRetired != 0 || r.Pending {
		t.Fatalf("idle tick retired %+v", r)
	}
	// Once no feed holds it, the old record goes with the next full lap
	// of the scan, a tenth of the window (6 min of event time) after the
	// last. The laps in between examine only what aged out since: not
	// the record they stepped over.
	unfollowed := 3*hourUS + hourUS/2 + 1
	minuteUS := int64(time.Minute / time.Microsecond)
	apply(t, s, unfollow("v", "f", unfollowed))
	if r := tick(t, s, t0.Add(1002*time.Hour), false); r.RecordsRetired != 0 {
		t.Fatalf("retired %d records before the next lap was due", r.RecordsRetired)
	}
	apply(t, s, post("bob", "later", unfollowed+minuteUS))
	if r := tick(t, s, t0.Add(1003*time.Hour), false); r.RecordsRetired != 0 || r.RecordsExamined != 0 {
		t.Fatalf("a lap between full laps retired %d and examined %d records, want none", r.RecordsRetired, r.RecordsExamined)
	}
	apply(t, s, post("bob", "latest", unfollowed+6*minuteUS))
	if r := tick(t, s, t0.Add(1004*time.Hour), false); r.RecordsRetired != 1 {
		t.Fatalf("retired %d records at the full lap after the unfollow, want 1", r.RecordsRetired)
	}
	if got, want := storedRKeys(t, s, "records"), []string{"late", "later", "latest", "orphan-new"}; !slices.Equal(got, want) {
		t.Fatalf("records = %v, want %v", got, want)
	}
}

// TestRetentionScansInBoundedSlices: records that feeds hold are stepped
// over, never examined again by the same lap, and the scan position
// survives ties in indexed time across slice boundaries.
func TestRetentionScansInBoundedSlices(t *testing.T) {
	t.Parallel()
	feeds := []Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 10,
		Targets: []Target{{Collection: postNSID, Cap: 1000}}}}
	s := openSweep(t, t.TempDir()+"/appview.db", feeds, SweepOptions{Retention: time.Hour, TombstoneWindow: -1})
	apply(t, s, post("alice", "first", 1))
	const n = 2500
	// Bulk records: ids after "first", indexed times tied in runs of 700
	// so slices end inside a tie; every tenth is in a feed.
	if _, err := s.writer.Exec(`
		WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?1)
		INSERT INTO records (actor_id, collection_id, rkey, cid, rev, sort_us, indexed_us, created_us, body)
		SELECT 1, ?2, 'r' || i, 'c', 'rev', 10 + i / 700, 10 + i / 700, 0, '{}' FROM seq`,
		n, s.targetColls[postNSID]); err != nil {
		t.Fatal(err)
	}
	// Viewer v follows alice (written directly: no merge) and holds every
	// tenth record; only followers of an author can hold its records.
	for _, q := range []string{
		`INSERT INTO actors (did) VALUES ('did:plc:v')`,
		`INSERT INTO follows (actor_id, collection_id, rkey, subject_id, rev)
		 SELECT id, ?2, 'f', 1, 'rev' FROM actors WHERE did = 'did:plc:v'`,
		`INSERT INTO feed_items (viewer_id, target_id, sort_us, record_id)
		 SELECT (SELECT id FROM actors WHERE did = 'did:plc:v'), ?1, sort_us, id FROM records
		 WHERE rkey LIKE 'r%' AND CAST(substr(rkey, 2) AS INTEGER) % 10 = 0`,
	} {
		if _, err := s.writer.Exec(q, s.lanes[0].id, s.followColls[followNSID]); err != nil {
			t.Fatal(err)
		}
	}
	apply(t, s, post("alice", "now", 10*hourUS))
	var retired int64
	ticks := 0
	for r := tick(t, s, t0, false); ; r = tick(t, s, t0, false) {
		ticks++
		retired += r.RecordsRetired
		if !r.Pending {
			break
		}
	}
	if want := int64(n - n/10 + 1); retired != want {
		t.Fatalf("retired %d records, want %d", retired, want)
	}
	// 2501 candidates at 1000 per slice.
	if ticks != 3 {
		t.Fatalf("retention took %d ticks, want 3", ticks)
	}
	if got := querySQL[int](t, s, `SELECT count(*) FROM records`); got != n/10+1 {
		t.Fatalf("%d records left, want the %d held and the new one", got, n/10)
	}
}

// TestRetentionBoundsRecordsUnderASteadyStream: with feeds at cap, the
// records table holds what feeds hold plus the retention window, and the
// file stops growing (freed pages are reused; no vacuum involved).
func TestRetentionBoundsRecordsUnderASteadyStream(t *testing.T) {
	t.Parallel()
	// One post per event-time millisecond; window is the retention
	// window in posts.
	posts, window, batch := 20_000, 1000, 100
	if raceEnabled {
		posts, window = 1_200, 200
	}
	const (
		authors = 20
		viewers = 40
	)
	feeds := []Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 10,
		Targets: []Target{{Collection: postNSID, Cap: 10}}}}
	s := openSweep(t, t.TempDir()+"/appview.db", feeds,
		SweepOptions{Actors: 500, Retention: time.Duration(window) * time.Millisecond, TombstoneWindow: time.Second})
	var follows []Change
	for v := range viewers {
		for k := range 3 {
			follows = append(follows, follow(fmt.Sprintf("v%d", v), fmt.Sprintf("a%d", (v+k*7)%authors), fmt.Sprintf("f%d", k), 1))
		}
	}
	apply(t, s, follows...)
	var pagesAtHalf int64
	for i := 0; i < posts; i += batch {
		var changes []Change
		for j := i; j < i+batch; j++ {
			changes = append(changes, post(fmt.Sprintf("a%d", j%authors), fmt.Sprintf("p%d", j), int64(j+1)*1000))
		}
		res := apply(t, s, changes...)
		tick(t, s, t0, res.MutatedFeeds())
		if i+batch == posts/2 {
			pagesAtHalf = querySQL[int64](t, s, `PRAGMA page_count`)
		}
	}
	held := querySQL[int](t, s, `SELECT count(DISTINCT record_id) FROM feed_items`)
	records := querySQL[int](t, s, `SELECT count(*) FROM records`)
	// The scan's laps start a tenth of the window apart.
	if records > held+window+window/10+batch {
		t.Fatalf("%d records stored, want at most %d held + %d in the window (+10%% and one batch)", records, held, window)
	}
	if got := feedsOverCap(t, s); got != 0 {
		t.Fatalf("%d feeds over cap", got)
	}
	pages := querySQL[int64](t, s, `PRAGMA page_count`)
	// Page reuse leaves a little slack (B-tree splits, a few free pages):
	// measured, the file grows about 5% between 10k and 40k posts, then
	// not at all up to 100k.
	if pages > pagesAtHalf+pagesAtHalf/10 {
		t.Fatalf("file grew from %d to %d pages over the second half of the stream", pagesAtHalf, pages)
	}
	t.Logf("%d posts: %d records stored (%d held by feeds), %d pages at half, %d at the end", posts, records, held, pagesAtHalf, pages)
}

func TestIncrementalVacuumReturnsFreedPages(t *testing.T) {
	t.Parallel()
	feeds := []Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 10,
		Targets: []Target{{Collection: postNSID, Cap: 1}}}}
	s := openSweep(t, t.TempDir()+"/appview.db", feeds,
		SweepOptions{Retention: time.Microsecond, TombstoneWindow: time.Microsecond, IncrementalVacuum: true, VacuumPages: 16})
	if mode := querySQL[int](t, s, `PRAGMA auto_vacuum`); mode != 2 {
		t.Fatalf("auto_vacuum = %d, want 2 (incremental) on a new file", mode)
	}
	if mode := querySQL[int](t, MustOpen(t, feeds), `PRAGMA auto_vacuum`); mode != 0 {
		t.Fatalf("auto_vacuum = %d by default, want 0 (none)", mode)
	}
	changes := []Change{follow("v", "alice", "f", 1)}
	for i := range 2000 {
		changes = append(changes, post("alice", fmt.Sprintf("p%d", i), int64(10+i)))
	}
	res := apply(t, s, changes...)
	peak := querySQL[int64](t, s, `PRAGMA page_count`)
	var vacuumed int64
	ticks := 0
	for r := tick(t, s, t0, res.MutatedFeeds()); ; r = tick(t, s, t0, false) {
		ticks++
		if r.VacuumedPages > 16 {
			t.Fatalf("one tick vacuumed %d pages, bound 16", r.VacuumedPages)
		}
		vacuumed += r.VacuumedPages
		if !r.Pending {
			break
		}
	}
	pages := querySQL[int64](t, s, `PRAGMA page_count`)
	free := querySQL[int64](t, s, `PRAGMA freelist_count`)
	if free > 16 || vacuumed == 0 || pages >= peak-vacuumed+1 {
		t.Fatalf("after %d ticks: %d pages (peak %d), %d free, %d vacuumed", ticks, pages, peak, free, vacuumed)
	}
	t.Logf("%d ticks: %d → %d pages, %d vacuumed, %d left free", ticks, peak, pages, vacuumed, free)
}

// A listed record older than the retention window is kept for the window
// from when it was listed: retired at the next lap, it would be gone
// before the first read that listed it merged it into a feed, and the
// listing would end complete with a hole.
func TestAListedOldRecordOutlivesTheLapAfterIt(t *testing.T) {
	s := openSweep(t, t.TempDir()+"/appview.db", defaultFeeds, SweepOptions{Retention: time.Hour, TombstoneWindow: time.Hour})
	apply(t, s, follow("v", "carol", "f", 1), post("bob", "now", 3*hourUS)) // the stream is at 3 h
	old := ListedRecord{
		RKey: syntax.RecordKey(syntax.NewTID(1, 0)), CID: "bafyold", // written at the epoch
		Value: json.RawMessage(`{"$type":"app.bsky.feed.post","text":"old"}`),
	}
	page := &ListingPage{Account: did("carol"), Collection: postNSID, Records: []ListedRecord{old}, To: Listing{Round: 1, Page: 1, Cursor: "c1"}}
	if _, err := s.ApplyListingPage(context.Background(), page, t0.Add(1000*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if r := tick(t, s, t0.Add(1000*time.Hour), false); r.RecordsRetired != 0 {
		t.Fatalf("retired %d records: the listed post went before any feed could hold it", r.RecordsRetired)
	}
	if got := storedRKeys(t, s, "records"); !slices.Contains(got, string(old.RKey)) {
		t.Fatalf("records = %v, want the listed post kept", got)
	}
	// A window later (stream time), no feed holding it, it goes.
	apply(t, s, post("bob", "later", 3*hourUS+2*hourUS))
	tick(t, s, t0.Add(1001*time.Hour), false)
	if got := storedRKeys(t, s, "records"); slices.Contains(got, string(old.RKey)) {
		t.Fatalf("records = %v: the listed post outlived a whole window past its listing", got)
	}
}

// A retention slice ends where the probes of its records (one per lane of
// each follower of the author) would pass its budget, so a run of a
// popular author's old posts is retired a few at a time instead of in one
// transaction of followers × records seeks; a record costing more than the
// whole budget still goes, alone.
func TestRetentionSlicesAreBoundedInProbes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		budget int64
		want   []int64 // records retired per tick
	}{
		// alice's records cost 30 probes each, bob's 1.
		{budget: 100, want: []int64{3, 3, 3, 6}},
		{budget: 10, want: []int64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 5}},
	} {
		s := openSweep(t, t.TempDir()+"/appview.db", defaultFeeds, SweepOptions{Retention: time.Hour, TombstoneWindow: -1})
		s.sweep.probeBudget = tc.budget
		// Ten old records of alice, then five of bob; no feed holds them.
		seedOldRecords(t, s, 5)
		apply(t, s, post("carol", "now", 10*hourUS))
		var got []int64
		for r := tick(t, s, t0, false); ; r = tick(t, s, t0, false) {
			got = append(got, r.RecordsRetired)
			if !r.Pending || len(got) > 20 {
				break
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("budget %d: retired %v per tick, want %v", tc.budget, got, tc.want)
		}
	}
}

// The scan goes in indexed-time order, so a record stored late with an
// old time (a replay) goes with its time, not behind the younger records
// stored before it.
func TestRetentionRetiresAReplayStoredAfterAYoungerRecord(t *testing.T) {
	s := openSweep(t, t.TempDir()+"/appview.db", defaultFeeds, SweepOptions{Retention: time.Hour, TombstoneWindow: -1})
	apply(t, s, post("alice", "old", 1), post("alice", "young", 3*hourUS))
	apply(t, s, post("alice", "replayed", 2)) // after young, older than it
	apply(t, s, post("alice", "now", 3*hourUS+hourUS/2))
	r := tick(t, s, t0, false)
	if r.RecordsRetired != 2 || r.RecordsExamined != 2 || r.Pending {
		t.Fatalf("first lap: %+v, want old and replayed retired and the lap over", r)
	}
	if got, want := storedRKeys(t, s, "records"), []string{"now", "young"}; !slices.Equal(got, want) {
		t.Fatalf("records = %v, want %v", got, want)
	}
	// young ages out: the next lap finds it.
	apply(t, s, post("alice", "later", 4*hourUS+int64(time.Minute/time.Microsecond)))
	settleRetention(t, s)
	if got, want := storedRKeys(t, s, "records"), []string{"later", "now"}; !slices.Equal(got, want) {
		t.Fatalf("records = %v, want %v", got, want)
	}
}

// A restart goes on with the lap its stored position belongs to. Starting
// a full lap at every start left a daemon restarted more often than a lap
// takes stuck on the held records at the front of the scan: here ten held
// records of an author with 30 followers, one per slice, and the unheld
// record of bob behind them.
func TestARestartGoesOnWithTheRetentionLap(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	open := func() *Store {
		s := openSweep(t, path, defaultFeeds, SweepOptions{Retention: time.Hour, TombstoneWindow: -1})
		s.sweep.probeBudget = 10
		return s
	}
	s := open()
	seedOldRecords(t, s, 1)
	// The first follower holds alice's ten records.
	if _, err := s.writer.Exec(`INSERT INTO feed_items (viewer_id, target_id, sort_us, record_id)
		SELECT (SELECT id FROM actors WHERE did = 'did:plc:v1'), ?1, sort_us, id FROM records
		WHERE actor_id = (SELECT id FROM actors WHERE did = 'did:plc:alice')`, s.lanes[0].id); err != nil {
		t.Fatal(err)
	}
	apply(t, s, post("carol", "now", 10*hourUS))
	for range 5 {
		for range 3 {
			tick(t, s, t0, false)
		}
		s.Close()
		s = open()
	}
	if n := querySQL[int](t, s, `SELECT count(*) FROM records WHERE rkey = 'r10'`); n != 0 {
		t.Errorf("bob's unheld old record is still stored after five restarts")
	}
}

// seedOldRecords writes, in index_all mode and straight into the tables,
// alice with 30 followers (did:plc:v1…v30) and bob with none, then ten old
// records of alice (r0…r9) and then as many as bobs of bob (r10…), held
// by no feed.
func seedOldRecords(t *testing.T, s *Store, bobs int) {
	t.Helper()
	for _, q := range []string{
		`INSERT INTO actors (did) VALUES ('did:plc:alice'), ('did:plc:bob')`,
		`WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < 30)
		 INSERT INTO actors (did) SELECT 'did:plc:v' || i FROM seq`,
		`INSERT INTO follows (actor_id, collection_id, rkey, subject_id, rev)
		 SELECT id, ?2, 'f', (SELECT id FROM actors WHERE did = 'did:plc:alice'), 'rev'
		 FROM actors WHERE did LIKE 'did:plc:v%'`,
		`WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i < 9 + ?3)
		 INSERT INTO records (actor_id, collection_id, rkey, cid, rev, sort_us, indexed_us, created_us, body)
		 SELECT (SELECT id FROM actors WHERE did = CASE WHEN i < 10 THEN 'did:plc:alice' ELSE 'did:plc:bob' END),
		        ?1, 'r' || i, 'c', 'rev', 10 + i, 10 + i, 0, '{}' FROM seq`,
	} {
		if _, err := s.writer.Exec(q, s.targetColls[postNSID], s.followColls[followNSID], bobs); err != nil {
			t.Fatal(err)
		}
	}
}

// cursorAt moves the stream cursor without changes.
func cursorAt(t *testing.T, s *Store, us int64) {
	t.Helper()
	if _, err := s.ApplyBatch(context.Background(), &Batch{Cursor: StreamCursor{TimeUS: us}}); err != nil {
		t.Fatal(err)
	}
}

// settleRetention runs retention ticks until nothing is pending.
func settleRetention(t *testing.T, s *Store) {
	t.Helper()
	for r := tick(t, s, t0, false); r.Pending; r = tick(t, s, t0, false) {
	}
}

// Records a feed held when the scan passed them, and let go later, go at
// the next full lap, even for a daemon restarted more often than a full
// lap comes round: its due time is stored with the scan position.
func TestFullLapsRunForADaemonRestartedOften(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	open := func() *Store {
		return openSweep(t, path, defaultFeeds, SweepOptions{Retention: time.Hour, TombstoneWindow: -1})
	}
	s := open()
	seedOldRecords(t, s, 0)
	mustExec(t, s, `INSERT INTO feed_items (viewer_id, target_id, sort_us, record_id)
		SELECT (SELECT id FROM actors WHERE did = 'did:plc:v1'), ?, sort_us, id FROM records`, s.lanes[0].id)
	now := 2 * hourUS
	cursorAt(t, s, now)
	settleRetention(t, s) // the first lap steps over the ten held records
	mustExec(t, s, `DELETE FROM feed_items`)
	for range 40 {
		s.Close()
		s = open()
		now += 5 * int64(time.Minute/time.Microsecond)
		cursorAt(t, s, now)
		settleRetention(t, s)
	}
	if n := querySQL[int](t, s, `SELECT count(*) FROM records`); n != 0 {
		t.Errorf("%d records no feed holds any more are still stored after 200 min of restarts every 5 min", n)
	}
}

// A record stamped ahead of the stream (a listing's or notifyOfUpdate's
// own time, while the stream catches up) does not hold back the records
// stored after it, whatever the lag against the window, and full laps do
// not bring the scan back to stay in front of it.
func TestARecordAheadOfTheStreamDoesNotHoldRetentionBack(t *testing.T) {
	for _, tc := range []struct {
		name              string
		ahead             float64   // the record's time, in hours
		postsFrom, postTo float64   // posts stored after it, evenly
		cursors           []float64 // where the stream goes, settling at each
	}{
		{"a lag longer than the window", 25, 1.1, 3, []float64{6}},
		{"a lag shorter than the window", 1.5, 1.025, 1.5, []float64{2.2}},
		{"full laps after the stream passed it", 3, 1.1, 2.4, []float64{2.5, 3.5}},
		{"more records after it than a slice reads", 1.5, 1.01, 1.15, []float64{2.2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := func(x float64) int64 { return int64(x * float64(hourUS)) }
			s := openSweep(t, t.TempDir()+"/appview.db", defaultFeeds, SweepOptions{Retention: time.Hour, TombstoneWindow: -1})
			apply(t, s, post("alice", "first", hourUS))
			mustExec(t, s, `INSERT INTO records (actor_id, collection_id, rkey, cid, rev, sort_us, indexed_us, created_us, body)
				SELECT actor_id, collection_id, 'ahead', 'c', '', ?1, ?1, 0, '{}' FROM records WHERE rkey = 'first'`, h(tc.ahead))
			n := 20
			if strings.HasPrefix(tc.name, "more records") {
				n = 2 * retentionSlice
			}
			var posts []Change
			for i := range n {
				posts = append(posts, post("alice", fmt.Sprint("p", i), h(tc.postsFrom)+int64(i)*(h(tc.postTo)-h(tc.postsFrom))/int64(n-1)))
			}
			apply(t, s, posts...)
			var cutoff int64
			for _, c := range tc.cursors {
				cursorAt(t, s, h(c))
				settleRetention(t, s)
				cutoff = h(c) - hourUS
			}
			if n := querySQL[int](t, s, `SELECT count(*) FROM records WHERE indexed_us < ?`, cutoff); n != 0 {
				t.Errorf("%d records past the window are still stored", n)
			}
			// And the record ahead of the stream goes once it ages.
			cursorAt(t, s, h(tc.ahead)+hourUS+7*int64(time.Minute/time.Microsecond))
			settleRetention(t, s)
			if n := querySQL[int](t, s, `SELECT count(*) FROM records WHERE rkey = 'ahead'`); n != 0 {
				t.Errorf("the record ahead of the stream outlived its window")
			}
		})
	}
}

// A backlog of old tombstones, retired 1,000 a tick, does not hold back a
// full lap of the records that is due.
func TestATombstoneBacklogDoesNotDelayAFullLap(t *testing.T) {
	s := openSweep(t, t.TempDir()+"/appview.db", defaultFeeds, SweepOptions{Retention: time.Hour, TombstoneWindow: time.Hour})
	seedOldRecords(t, s, 0)
	mustExec(t, s, `INSERT INTO feed_items (viewer_id, target_id, sort_us, record_id)
		SELECT (SELECT id FROM actors WHERE did = 'did:plc:v1'), ?, sort_us, id FROM records`, s.lanes[0].id)
	minuteUS := int64(time.Minute / time.Microsecond)
	now := 2 * hourUS
	cursorAt(t, s, now)
	settleRetention(t, s) // a full lap steps over the held records; the next is due in 6 min
	mustExec(t, s, `DELETE FROM feed_items`)
	mustExec(t, s, `WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < 2500)
		INSERT INTO tombstones (actor_id, collection_id, rkey, rev, deleted_us)
		SELECT 1, ?, 't' || i, 'rev', 5 FROM seq`, s.targetColls[postNSID])
	cursorAt(t, s, now+minuteUS)
	if r := tick(t, s, t0, false); r.TombstonesRetired != retentionSlice || !r.Pending {
		t.Fatalf("first tick: %+v, want a full slice of tombstones and more to come", r)
	}
	cursorAt(t, s, now+7*minuteUS) // the full lap is due
	if r := tick(t, s, t0, false); r.RecordsRetired != 10 {
		t.Errorf("the tick the full lap was due retired %d records, want alice's ten", r.RecordsRetired)
	}
}

// A listing in progress that passes a stored record counts as having
// listed it: it ages from then, as a record the listing wrote does, so
// retention does not retire it behind the listing, which would complete
// without it (retainListing reopens complete listings only). Before, the
// record kept its old indexed time and the listing claimed a hole (found
// by a review).
func TestRetentionLeavesNoHoleBehindAListingInProgress(t *testing.T) {
	ctx := context.Background()
	s := openSweep(t, t.TempDir()+"/appview.db", defaultFeeds, SweepOptions{Retention: time.Hour, TombstoneWindow: -1})
	apply(t, s, post("bob", "old", 1)) // stored, held by no feed
	// v follows bob (so bob is in scope); no feed row holds "old".
	mustExec(t, s, `INSERT INTO actors (did) VALUES (?) ON CONFLICT DO NOTHING`, string(did("v")))
	mustExec(t, s, `INSERT INTO follows (actor_id, collection_id, rkey, subject_id, rev)
		SELECT (SELECT id FROM actors WHERE did = ?1), ?2, 'f', (SELECT id FROM actors WHERE did = ?3), 'r'`,
		string(did("v")), s.followColls[followNSID], string(did("bob")))
	rkey := "old"
	listed := ListedRecord{RKey: "old", CID: "bafypostold",
		Value: json.RawMessage(`{"$type":"app.bsky.feed.post","text":"old"}`)}
	now := t0.Add(1000 * time.Hour)
	// Page 1 of bob's listing passes the stored record, 59 minutes of
	// stream time after it was stored.
	apply(t, s, post("carol", "mid", 59*hourUS/60))
	if _, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("bob"), Collection: postNSID,
		Records: []ListedRecord{listed}, To: Listing{Round: 1, Page: 1, Cursor: "c1"}}, now); err != nil {
		t.Fatal(err)
	}
	// Stream time moves past the record's window, not the listing's.
	apply(t, s, post("carol", "now", 90*hourUS/60))
	settleRetention(t, s)
	// The listing's last page completes it.
	if _, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("bob"), Collection: postNSID,
		To: Listing{Round: 1, Page: 2, Complete: true}}, now); err != nil {
		t.Fatal(err)
	}
	complete := querySQL[int](t, s, `SELECT complete FROM listings WHERE actor_id = (SELECT id FROM actors WHERE did = ?)`, string(did("bob")))
	if got := storedRKeys(t, s, "records"); !slices.Contains(got, rkey) || complete != 1 {
		t.Fatalf("records = %v, listing complete = %d: want %q kept and the listing complete", got, complete, rkey)
	}
}

// The incremental vacuum runs outside a transaction, so it takes the
// write lock on its own. Held by another process past the busy timeout,
// it is ErrWriteBusy, which the ingester skips a tick for, not a raw
// SQLITE_BUSY, which stopped the daemon (a review); the vacuum goes on
// at a later tick.
func TestAVacuumBehindAnotherProcesssLockIsWriteBusy(t *testing.T) {
	t.Parallel()
	feeds := []Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 10,
		Targets: []Target{{Collection: postNSID, Cap: 1}}}}
	path := t.TempDir() + "/appview.db"
	s := openSweep(t, path, feeds, SweepOptions{Retention: 1, TombstoneWindow: -1, IncrementalVacuum: true, VacuumPages: 16})
	changes := []Change{follow("v", "alice", "f", 1)}
	for i := range 2000 {
		changes = append(changes, post("alice", fmt.Sprintf("p%d", i), int64(10+i)))
	}
	res := apply(t, s, changes...)
	tick(t, s, t0, res.MutatedFeeds())
	for s.sweep.retainMore {
		tick(t, s, t0, false)
	}
	if !s.sweep.vacuumMore {
		t.Fatal("no vacuum pending once retention was done")
	}
	release := writelock.Hold(t, path)
	_, err := s.SweepTick(context.Background(), Tick{Now: t0})
	release()
	// The tick's only write must be the vacuum's (with this retention
	// no lap of it is due again), or the test proves nothing.
	if !errors.Is(err, ErrWriteBusy) || !strings.Contains(err.Error(), "incremental vacuum") {
		t.Fatalf("a vacuum behind another process's lock: %v, want the vacuum's ErrWriteBusy", err)
	}
	if r := tick(t, s, t0, false); r.VacuumedPages == 0 {
		t.Fatalf("the next tick vacuumed nothing: %+v", r)
	}
}
