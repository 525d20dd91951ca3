package appview

import (
	"bufio"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/jetstream/jetstreamtest"
)

// These tests send records with surprising content through the real
// ingest path: a fake Jetstream on loopback, the websocket consumer, the
// decoder, the batching ingester and the store (index_all on).

const testCID = "bafyreigwuiotmkaytriom4alrxkamtlzsf35xljotttx6oy3hd63xuxyyq"

// commitFrame is a create commit carrying record, whatever it is.
func commitFrame(did, collection, rkey string, timeUS int64, record string) []byte {
	return []byte(fmt.Sprintf(`{"did":%q,"time_us":%d,"kind":"commit","commit":{"rev":%q,"operation":"create","collection":%q,"rkey":%q,"record":%s,"cid":%q}}`,
		did, timeUS, jetstreamtest.Rev(timeUS), collection, rkey, record, testCID))
}

// datedPost is a post whose createdAt is whatever the author claims.
func datedPost(did, rkey string, timeUS int64, createdAt string) []byte {
	return commitFrame(did, postNSID, rkey, timeUS,
		fmt.Sprintf(`{"$type":"app.bsky.feed.post","text":"dated","createdAt":%q}`, createdAt))
}

// metricValue reads one sample of the daemon's /metrics, 0 when absent.
func (td *testDaemon) metricValue(t *testing.T, sample string) float64 {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(td.metrics(t)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", sample, err)
			}
			return f
		}
	}
	return 0
}

func dropped(reason string) string {
	return `appview_jetstream_events_dropped_total{reason="` + reason + `"}`
}

// TestSelfFollow: a follow of yourself is stored like any follow, but
// your own posts never land in your own feed; others who follow you get
// them.
func TestSelfFollow(t *testing.T) {
	js := jetstreamtest.NewServer()
	defer js.Close()
	td := startDaemon(t, js, testConfig(t, js, t.TempDir()+"/appview.db"))
	alice, bob, carol := user("alice"), user("bob"), user("carol")
	now := time.Now().UnixMicro()
	js.Append(
		jetstreamtest.Follow(followNSID, alice, "3kself000000a", alice, now+1),
		jetstreamtest.Follow(followNSID, alice, "3kcarol00000a", carol, now+2),
		jetstreamtest.Follow(followNSID, bob, "3kalice00000b", alice, now+3),
		jetstreamtest.Post(alice, "3lalice000001", now+4, "by alice"),
		jetstreamtest.Post(carol, "3lcarol000001", now+5, "by carol"),
	)
	td.waitCursor(t, now+5)

	followees, err := td.Store().Followees(context.Background(), syntax.DID(alice), followNSID)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(followees, syntax.DID(alice)) || !slices.Contains(followees, syntax.DID(carol)) {
		t.Errorf("alice's stored followees %v, want herself and carol", followees)
	}
	if got, want := td.feed(t, alice), []string{"3lcarol000001"}; !slices.Equal(got, want) {
		t.Errorf("alice's feed %v, want %v (not her own post)", got, want)
	}
	if got, want := td.feed(t, bob), []string{"3lalice000001"}; !slices.Equal(got, want) {
		t.Errorf("bob's feed %v, want %v", got, want)
	}

	// Following yourself again, and unfollowing yourself, change nothing.
	js.Append(
		jetstreamtest.Follow(followNSID, alice, "3kself000000b", alice, now+6),
		jetstreamtest.Post(alice, "3lalice000002", now+7, "by alice again"),
		jetstreamtest.Delete(followNSID, alice, "3kself000000a", now+8),
		jetstreamtest.Delete(followNSID, alice, "3kself000000b", now+9),
	)
	td.waitCursor(t, now+9)
	if got, want := td.feed(t, alice), []string{"3lcarol000001"}; !slices.Equal(got, want) {
		t.Errorf("alice's feed after self-follow churn %v, want %v", got, want)
	}
	if got, want := td.feed(t, bob), []string{"3lalice000002", "3lalice000001"}; !slices.Equal(got, want) {
		t.Errorf("bob's feed %v, want %v", got, want)
	}
}

// TestPostDates: an item's sort key is min(indexed time, createdAt). A
// post dated 1970 sinks below everything; a post dated 2100 sorts at its
// indexed time, not above the posts that came after it.
func TestPostDates(t *testing.T) {
	js := jetstreamtest.NewServer()
	defer js.Close()
	td := startDaemon(t, js, testConfig(t, js, t.TempDir()+"/appview.db"))
	alice, carol := user("alice"), user("carol")
	base := time.Now().Add(-time.Minute).Truncate(time.Second)
	at := func(s int) int64 { return base.Add(time.Duration(s) * time.Second).UnixMicro() }
	iso := func(us int64) string { return time.UnixMicro(us).UTC().Format(time.RFC3339Nano) }
	june1970 := time.Date(1970, 6, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	js.Append(
		jetstreamtest.Follow(followNSID, alice, "3kcarol00000a", carol, at(0)),
		datedPost(carol, "3lhonest00001", at(1), iso(at(1))),
		datedPost(carol, "3lfuture00002", at(2), "2100-01-01T00:00:00Z"),
		datedPost(carol, "3lhonest00003", at(3), iso(at(3)-500_000)), // written half a second before indexing
		datedPost(carol, "3lold19700004", at(4), "1970-06-01T00:00:00Z"),
		datedPost(carol, "3lnodate00005", at(5), "not a date"),
	)
	td.waitCursor(t, at(5))

	page, err := td.Store().ReadFeed(context.Background(), feeds.PageQuery{
		Feed: "following", Viewer: syntax.DID(alice), Collection: postNSID, Limit: 100,
	})
	if err != nil {
		t.Fatal(err)
	}
	sortKey := map[string]int64{}
	var order []string
	for _, it := range page.Items {
		sortKey[it.RKey] = it.Key.SortUS
		order = append(order, it.RKey)
	}
	want := []string{"3lnodate00005", "3lhonest00003", "3lfuture00002", "3lhonest00001", "3lold19700004"}
	if !slices.Equal(order, want) {
		t.Errorf("feed order %v, want %v", order, want)
	}
	for rkey, key := range map[string]int64{
		"3lhonest00001": at(1),
		"3lfuture00002": at(2), // indexed time, not 2100
		"3lhonest00003": at(3) - 500_000,
		"3lold19700004": june1970,
		"3lnodate00005": at(5), // no usable createdAt: indexed time
	} {
		if sortKey[rkey] != key {
			t.Errorf("%s: sort key %d, want %d", rkey, sortKey[rkey], key)
		}
	}
	// Over HTTP the order is the same, and time_us is the indexed time.
	if got := td.feed(t, alice); !slices.Equal(got, want) {
		t.Errorf("getFeed order %v, want %v", got, want)
	}
	var resp feedResponse
	td.getJSON(t, getFeedPath+"?feed=following&actor="+alice, &resp)
	for _, r := range resp.Records {
		if r.RKey == "3lfuture00002" && r.TimeUS != at(2) {
			t.Errorf("2100 post: time_us %d, want its indexed time %d", r.TimeUS, at(2))
		}
	}
}

// TestPostDatedAtTheEpoch: createdAt 1970-01-01T00:00:00Z, or earlier, is
// a date as backdated as any other and must sink.
//
// createdAt travels as unix microseconds with 0 meaning "absent", so a
// date at or before the epoch is clamped to 1µs where it is read
// (jetstream datetimeUS, backfill parseRecord): it sinks instead of being
// taken for a missing date.
func TestPostDatedAtTheEpoch(t *testing.T) {
	js := jetstreamtest.NewServer()
	defer js.Close()
	td := startDaemon(t, js, testConfig(t, js, t.TempDir()+"/appview.db"))
	alice, carol := user("alice"), user("carol")
	now := time.Now().UnixMicro()
	js.Append(
		jetstreamtest.Follow(followNSID, alice, "3kcarol00000a", carol, now),
		datedPost(carol, "3lhonest00001", now+1, time.UnixMicro(now+1).UTC().Format(time.RFC3339Nano)),
		datedPost(carol, "3lepoch000002", now+2, "1970-01-01T00:00:00Z"),
		datedPost(carol, "3lbefore19703", now+3, "1969-07-20T20:17:40Z"),
	)
	td.waitCursor(t, now+3)
	got := td.feed(t, alice)
	if len(got) != 3 {
		t.Fatalf("feed %v, want 3 posts", got)
	}
	if got[0] != "3lhonest00001" {
		t.Errorf("feed %v: a post dated at or before the epoch must sink", got)
	}
}

// TestSurprisingRecordsAreDroppedAndCounted: records the decoder must not
// trust are dropped and counted by reason, never stored, and the cursor
// moves past them.
func TestSurprisingRecordsAreDroppedAndCounted(t *testing.T) {
	js := jetstreamtest.NewServer()
	defer js.Close()
	td := startDaemon(t, js, testConfig(t, js, t.TempDir()+"/appview.db"))
	alice, carol := user("alice"), user("carol")
	now := time.Now().UnixMicro()
	js.Append(jetstreamtest.Follow(followNSID, alice, "3kcarol00000a", carol, now))
	td.waitCursor(t, now)
	post := func(text string) string {
		return fmt.Sprintf(`{"$type":"app.bsky.feed.post","text":%q,"createdAt":"2026-11-29T00:00:00Z"}`, text)
	}
	follow := func(subject string) string {
		return `{"$type":"app.bsky.graph.follow","createdAt":"2026-11-29T00:00:00Z","subject":` + subject + `}`
	}
	deep := strings.Repeat(`{"a":`, 40) + `1` + strings.Repeat(`}`, 40)

	tests := []struct {
		name   string
		frame  func(ts int64) []byte
		reason string
	}{
		{"record over the size cap", func(ts int64) []byte {
			return commitFrame(carol, postNSID, "3lbig00000001", ts, post(strings.Repeat("x", 70_000)))
		}, "record_too_large"},
		{"frame over the frame cap", func(ts int64) []byte {
			return commitFrame(carol, postNSID, "3lhuge0000001", ts, post(strings.Repeat("x", 2<<20)))
		}, "frame_too_large"},
		{"record nested too deep", func(ts int64) []byte {
			return commitFrame(carol, postNSID, "3ldeep0000001", ts, `{"$type":"app.bsky.feed.post","text":"x","embed":`+deep+`}`)
		}, "too_deep"},
		{"unknown $type in the post collection", func(ts int64) []byte {
			return commitFrame(carol, postNSID, "3ltype0000001", ts, `{"$type":"com.example.unknown","text":"x"}`)
		}, "type_mismatch"},
		{"like $type in the post collection", func(ts int64) []byte {
			return commitFrame(carol, postNSID, "3ltype0000002", ts, `{"$type":"app.bsky.feed.like","subject":{"uri":"at://x","cid":"y"}}`)
		}, "type_mismatch"},
		{"no $type", func(ts int64) []byte {
			return commitFrame(carol, postNSID, "3ltype0000003", ts, `{"text":"x"}`)
		}, "type_mismatch"},
		{"$type not a string", func(ts int64) []byte {
			return commitFrame(carol, postNSID, "3ltype0000004", ts, `{"$type":7,"text":"x"}`)
		}, "type_mismatch"},
		{"record not an object", func(ts int64) []byte {
			return commitFrame(carol, postNSID, "3larray000001", ts, `["app.bsky.feed.post"]`)
		}, "bad_record"},
		{"follow of a handle", func(ts int64) []byte {
			return commitFrame(alice, followNSID, "3khandle00001", ts, follow(`"bob.test"`))
		}, "bad_subject"},
		{"follow of an at-uri", func(ts int64) []byte {
			return commitFrame(alice, followNSID, "3khandle00002", ts, follow(`"at://did:plc:bob"`))
		}, "bad_subject"},
		{"follow of an object", func(ts int64) []byte {
			return commitFrame(alice, followNSID, "3khandle00003", ts, follow(`{"did":"did:plc:bob"}`))
		}, "bad_subject"},
		{"follow without subject", func(ts int64) []byte {
			return commitFrame(alice, followNSID, "3khandle00004", ts, `{"$type":"app.bsky.graph.follow","createdAt":"2026-11-29T00:00:00Z"}`)
		}, "bad_subject"},
		{"invalid UTF-8", func(ts int64) []byte {
			// Raw bytes: %q would escape them.
			return commitFrame(carol, postNSID, "3lutf80000001", ts, `{"$type":"app.bsky.feed.post","text":"bad `+"\xff\xfe"+` bytes"}`)
		}, "bad_utf8"},
		{"record key with a slash", func(ts int64) []byte {
			return commitFrame(carol, postNSID, "3l/../../x", ts, post("x"))
		}, "bad_rkey"},
		{"author not a DID", func(ts int64) []byte {
			return commitFrame("carol.test", postNSID, "3lnotdid00001", ts, post("x"))
		}, "bad_did"},
	}
	ts := now
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := td.metricValue(t, dropped(tt.reason))
			ts += 1000
			// A dropped frame moves no position, so a valid post of an
			// account nobody follows comes after it: once the cursor
			// reaches it, the frame before it was read and dropped.
			js.Append(tt.frame(ts), jetstreamtest.Post(user("dave"), fmt.Sprintf("3lsent%07d", i), ts+500, "sentinel"))
			td.waitCursor(t, ts+500)
			if got := td.metricValue(t, dropped(tt.reason)); got != before+1 {
				t.Errorf("%s drops %v, want %v", tt.reason, got, before+1)
			}
			if got := td.feed(t, alice); len(got) != 0 {
				t.Errorf("alice's feed %v, want empty", got)
			}
		})
	}

	// Nothing of it was stored: alice still follows carol only, and the
	// stream goes on.
	followees, err := td.Store().Followees(context.Background(), syntax.DID(alice), followNSID)
	if err != nil || !slices.Equal(followees, []syntax.DID{syntax.DID(carol)}) {
		t.Errorf("alice follows %v (%v), want only carol", followees, err)
	}
	ts += 1000
	js.Append(jetstreamtest.Post(carol, "3lfine0000001", ts, "fine"))
	td.waitCursor(t, ts)
	if got, want := td.feed(t, alice), []string{"3lfine0000001"}; !slices.Equal(got, want) {
		t.Errorf("alice's feed %v, want %v", got, want)
	}
}

// junkFrame is one of a dozen kinds of malformed frame; those that carry a
// time_us carry ts.
func junkFrame(i int, ts int64) []byte {
	carol := user("carol")
	switch i % 12 {
	case 0:
		return []byte("this is not json")
	case 1:
		return []byte(fmt.Sprintf(`{"did":%q,"time_us":%d,"kind":"commit","commit":{`, carol, ts)) // truncated
	case 2:
		return []byte(fmt.Sprintf(`{"did":"not a did","time_us":%d,"kind":"commit"}`, ts))
	case 3:
		return []byte(fmt.Sprintf(`{"did":%q,"time_us":%d,"kind":"surprise"}`, carol, ts))
	case 4:
		return commitFrame(carol, postNSID, fmt.Sprintf("3ljunk%07d", i), ts, `{"$type":"app.bsky.feed.like"}`)
	case 5:
		return commitFrame(carol, postNSID, fmt.Sprintf("3ljunk%07d", i), ts, `{"$type":"app.bsky.feed.post","text":"`+"\xff"+`"}`)
	case 6:
		return commitFrame(carol, "not-an-nsid", fmt.Sprintf("3ljunk%07d", i), ts, `{}`)
	case 7:
		return commitFrame(carol, postNSID, "..", ts, `{"$type":"app.bsky.feed.post"}`)
	case 8:
		return commitFrame(user("alice"), followNSID, fmt.Sprintf("3kjunk%07d", i), ts, `{"$type":"app.bsky.graph.follow","subject":"carol.test"}`)
	case 9:
		return []byte(fmt.Sprintf(`{"did":%q,"time_us":-%d,"kind":"commit"}`, carol, ts))
	case 10:
		return []byte(fmt.Sprintf(`{"did":%q,"time_us":"%d","kind":"commit"}`, carol, ts)) // time_us a string
	default:
		return commitFrame(carol, postNSID, fmt.Sprintf("3ljunk%07d", i), ts, strings.Repeat("[", 100)+strings.Repeat("]", 100))
	}
}

// TestMalformedFlood: 20,000 malformed frames interleaved with 150 valid
// posts are dropped and counted; every valid post is applied, the
// committed cursor reaches the last valid post, and the junk after it,
// stamped later, does not move it (a frame judged bad moves no position:
// jetstream TestAMalformedFrameStampedAheadIsNotThePosition).
func TestMalformedFlood(t *testing.T) {
	js := jetstreamtest.NewServer()
	defer js.Close()
	cfg := testConfig(t, js, t.TempDir()+"/appview.db")
	// Compression is off: under the race detector, deflating 20k frames
	// in the fake server alone takes longer than the test should.
	cfg.Jetstream.Compression = false
	td := startDaemon(t, js, cfg)
	alice, carol := user("alice"), user("carol")
	now := time.Now().Add(-time.Minute).UnixMicro()
	js.Append(jetstreamtest.Follow(followNSID, alice, "3kcarol00000a", carol, now))
	td.waitCursor(t, now)
	droppedBefore := td.totalDropped(t)

	const valid, junkPer = 150, 133 // 150 × 133 = 19,950 junk frames, + 50 at the end
	var frames [][]byte
	var want []string
	ts := now
	junk := 0
	for i := range valid {
		ts += 1000
		rkey := fmt.Sprintf("3lvalid%06d", i)
		frames = append(frames, jetstreamtest.Post(carol, rkey, ts, "valid"))
		want = append(want, rkey)
		for range junkPer {
			frames = append(frames, junkFrame(junk, ts))
			junk++
		}
	}
	lastValid := ts
	ts += 1000
	for range 49 {
		frames = append(frames, junkFrame(junk, ts))
		junk++
	}
	// The last frame is junk with a readable time_us, later than the
	// last valid post's: the cursor must not get there.
	frames = append(frames, []byte(fmt.Sprintf(`{"did":"not a did","time_us":%d,"kind":"commit"}`, ts)))
	junk++
	if junk != 20_000 {
		t.Fatalf("%d junk frames", junk)
	}

	start := time.Now()
	js.Append(frames...)
	// Not td.waitCursor: its 10s is short for 20k frames under the race
	// detector on a busy machine; a stalled cursor still fails here.
	for td.Store().Cursor().TimeUS < lastValid {
		if time.Since(start) > time.Minute {
			t.Fatalf("cursor stuck at %d, want %d", td.Store().Cursor().TimeUS, lastValid)
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(start)
	t.Logf("%d frames (%d junk) ingested in %s (%.0f frames/s)", len(frames), junk, took, float64(len(frames))/took.Seconds())

	// The last 50 frames share the final time_us, so the cursor gets
	// there with the first of them committed while the reader may still
	// be counting the rest: the drops are awaited, not read once.
	got := td.totalDropped(t) - droppedBefore
	for deadline := time.Now().Add(10 * time.Second); got < float64(junk) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		got = td.totalDropped(t) - droppedBefore
	}
	if got != float64(junk) {
		t.Errorf("dropped %v frames, want %d", got, junk)
	}
	if c := td.Store().Cursor().TimeUS; c != lastValid {
		t.Errorf("cursor %d after the trailing junk, want the last valid post's %d", c, lastValid)
	}
	slices.Reverse(want)
	if got := td.feed(t, alice); !slices.Equal(got, want) {
		t.Errorf("alice's feed has %d posts, want the %d valid ones", len(got), len(want))
	}
}

// totalDropped sums the dropped-frame counter over every reason.
func (td *testDaemon) totalDropped(t *testing.T) float64 {
	t.Helper()
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(td.metrics(t)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "appview_jetstream_events_dropped_total{") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatal(err)
		}
		sum += v
	}
	return sum
}
