package xrpc

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/atfeeds/appview/feeds"
	"github.com/bluesky-social/indigo/atproto/syntax"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

func postItem(author syntax.DID, rkey string, sortUS, id int64, value string) feeds.Item {
	return feeds.Item{
		URI:        "at://" + string(author) + "/app.bsky.feed.post/" + rkey,
		CID:        "bafyreib" + strings.Repeat("a", 51),
		DID:        string(author),
		Collection: string(posts),
		RKey:       rkey,
		TimeUS:     sortUS + 7,
		Value:      json.RawMessage(value),
		Key:        feeds.PageKey{SortUS: sortUS, RecordID: id},
	}
}

// goldenReader holds alice's "following" feed: three posts, two of which
// share a sort key.
func goldenReader() *fakeReader {
	r := newFakeReader()
	r.add(cursorScope{Feed: "following", Actor: alice, Collection: posts},
		postItem(bob, "3lbbbbbbbbbb2", 1795975616991124, 11,
			`{"$type":"app.bsky.feed.post","createdAt":"2026-11-30T12:00:00Z","langs":["en"],"text":"hello <world> & \"friends\" ☀"}`),
		postItem(bob, "3lcccccccccc2", 1795975616991124, 12,
			`{"$type":"app.bsky.feed.post","createdAt":"2026-11-30T12:00:00Z","text":"same microsecond","n":1.50e3}`),
		postItem(bob, "3laaaaaaaaaa2", 1795975616000000, 3,
			`{"$type":"app.bsky.feed.post","createdAt":"2026-11-30T11:59:59Z","text":"older","embed":{"$type":"app.bsky.embed.images","images":[]}}`),
	)
	return r
}

func TestGetFeedGolden(t *testing.T) {
	r := goldenReader()
	base := serve(t, testConfig(r))
	res := do(t, http.MethodGet, base+getFeedURL+"?feed=following&actor="+string(alice)+"&limit=2")
	if res.Status != http.StatusOK {
		t.Fatalf("status %d, body %s", res.Status, res.Body)
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	if q := r.lastQuery(t); q.Limit != 2 || q.Before != nil || q.Collection != posts || q.Viewer != alice || q.Feed != "following" {
		t.Errorf("reader got %+v", q)
	}

	golden := filepath.Join("testdata", "getfeed.golden.json")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, res.Body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(res.Body, want) {
		t.Errorf("response differs from %s (run with -update if intended)\ngot:  %s\nwant: %s", golden, res.Body, want)
	}
}

func TestGetFeedEmpty(t *testing.T) {
	base := serve(t, testConfig(newFakeReader()))
	res := do(t, http.MethodGet, base+getFeedURL+"?feed=mutuals&actor="+string(bob))
	if res.Status != http.StatusOK {
		t.Fatalf("status %d, body %s", res.Status, res.Body)
	}
	if got, want := string(res.Body), `{"records":[]}`+"\n"; got != want {
		t.Errorf("body %q, want %q", got, want)
	}
}

// TestGetFeedPaging walks a feed one item at a time through the cursor and
// checks that items sharing a sort key are neither skipped nor repeated.
func TestGetFeedPaging(t *testing.T) {
	r := goldenReader()
	base := serve(t, testConfig(r))

	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("cursor does not advance")
		}
		u := base + getFeedURL + "?feed=following&limit=1&actor=" + url.QueryEscape(string(alice))
		if cursor != "" {
			u += "&cursor=" + url.QueryEscape(cursor)
		}
		res := do(t, http.MethodGet, u)
		if res.Status != http.StatusOK {
			t.Fatalf("status %d, body %s", res.Status, res.Body)
		}
		var out struct {
			Records []struct{ RKey string }
			Cursor  *string
		}
		if err := json.Unmarshal(res.Body, &out); err != nil {
			t.Fatal(err)
		}
		for _, rec := range out.Records {
			got = append(got, rec.RKey)
		}
		if out.Cursor == nil {
			break
		}
		if *out.Cursor == "" {
			t.Fatal("empty cursor instead of none")
		}
		cursor = *out.Cursor
	}
	want := []string{"3lcccccccccc2", "3lbbbbbbbbbb2", "3laaaaaaaaaa2"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("paged %v, want %v", got, want)
	}
}

func TestGetFeedCollection(t *testing.T) {
	r := newFakeReader()
	base := serve(t, testConfig(r))
	for _, tt := range []struct{ query, want string }{
		{"", string(posts)},
		{"&collection=app.bsky.feed.repost", string(reposts)},
		{"&collection=APP.Bsky.feed.repost", string(reposts)}, // the authority is case-insensitive
	} {
		res := do(t, http.MethodGet, base+getFeedURL+"?feed=following&actor="+string(alice)+tt.query)
		if res.Status != http.StatusOK {
			t.Fatalf("%q: status %d, body %s", tt.query, res.Status, res.Body)
		}
		if q := r.lastQuery(t); string(q.Collection) != tt.want || q.Limit != defaultLimit {
			t.Errorf("%q: reader got %+v", tt.query, q)
		}
	}
}

// A record whose stored body is not valid JSON, or not UTF-8 (damaged at
// rest, or stored by a version whose listings let invalid UTF-8 through:
// every way in checks both now), is left out of the page, and the rest of
// the page is served as valid JSON in UTF-8. The store checks it when it
// reads the record from the file (feeds.Item.Value), so the handler embeds
// values unchecked.
func TestGetFeedSkipsARecordDamagedAtRest(t *testing.T) {
	for name, damage := range map[string]string{
		"cut short": `'{"text":'`,
		"not UTF-8": `CAST(X'7B2274657874223A2261FF62227D' AS TEXT)`, // {"text":"a\xffb"}
	} {
		t.Run(name, func(t *testing.T) { getFeedSkipsARecordDamagedAtRest(t, damage) })
	}
}

func getFeedSkipsARecordDamagedAtRest(t *testing.T, damage string) {
	ctx := context.Background()
	path := t.TempDir() + "/appview.db"
	s, err := feeds.Open(ctx, feeds.Options{
		Path: path, IndexAll: true, RecordCacheMB: 1,
		Feeds: []feeds.Feed{{Name: "following", FollowCollection: "app.bsky.graph.follow", MergeLimit: 100,
			Targets: []feeds.Target{{Collection: posts, Cap: 100}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	post := func(rkey string, us int64, body string) feeds.Change {
		return feeds.Change{DID: bob, Collection: posts, RKey: syntax.RecordKey(rkey), Op: feeds.OpCreate,
			Rev: rkey, CID: "bafypost", TimeUS: us, Record: json.RawMessage(body)}
	}
	if _, err := s.ApplyBatch(ctx, &feeds.Batch{Changes: []feeds.Change{
		{DID: alice, Collection: "app.bsky.graph.follow", RKey: "3kfollow0000a", Op: feeds.OpCreate,
			Rev: "3kfollow0000a", CID: "bafyfollow", Subject: bob, TimeUS: 1,
			Record: json.RawMessage(fmt.Sprintf(`{"subject":%q}`, bob))},
		post("3lbbbbbbbbbb2", 20, `{"text":"good"}`),
		post("3laaaaaaaaaa2", 10, `{"text":"soon damaged"}`),
	}, Cursor: feeds.StreamCursor{TimeUS: 20}}); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE records SET body = ` + damage + ` WHERE rkey = '3laaaaaaaaaa2'`); err != nil {
		t.Fatal(err)
	}

	base := serve(t, testConfig(s))
	res := do(t, http.MethodGet, base+getFeedURL+"?feed=following&actor="+string(alice))
	if res.Status != http.StatusOK {
		t.Fatalf("status %d, body %s", res.Status, res.Body)
	}
	var out struct {
		Records []struct {
			RKey string `json:"rkey"`
		} `json:"records"`
	}
	if err := json.Unmarshal(res.Body, &out); err != nil || !utf8.Valid(res.Body) {
		t.Fatalf("the page is not valid JSON in UTF-8: %v\n%q", err, res.Body)
	}
	if len(out.Records) != 1 || out.Records[0].RKey != "3lbbbbbbbbbb2" {
		t.Errorf("records %+v, want only the undamaged 3lbbbbbbbbbb2", out.Records)
	}
}

// TestGetFeedBadRequests checks every way to get a 400 (and the other
// errors of the getFeed URL), and that the server answers a good request
// after each.
func TestGetFeedBadRequests(t *testing.T) {
	r := goldenReader()
	base := serve(t, testConfig(r))
	good := "feed=following&actor=" + string(alice)
	scope := cursorScope{Feed: "following", Actor: alice, Collection: posts}
	key := feeds.PageKey{SortUS: 1795975616991124, RecordID: 12}
	valid := encodeCursor(scope, key)
	tampered := tamper(t, valid, 5)
	otherActor := encodeCursor(cursorScope{Feed: "following", Actor: bob, Collection: posts}, key)
	otherFeed := encodeCursor(cursorScope{Feed: "mutuals", Actor: alice, Collection: posts}, key)
	otherCollection := encodeCursor(cursorScope{Feed: "following", Actor: alice, Collection: reposts}, key)
	_, enScope, _ := parseFilters(url.Values{"langs": {"en"}}, testFeeds[0], posts)
	filtered := encodeCursor(cursorScope{Feed: "following", Actor: alice, Collection: posts, Filter: enScope}, key)

	const (
		invalid   = "InvalidRequest"
		badLimit  = "limit must be an integer from 1 to 100"
		badCursor = "invalid cursor"
	)
	tests := []struct {
		name    string
		method  string
		query   string
		status  int
		errName string
		message string
	}{
		{"no parameters", "GET", "", 400, invalid, "feed is required"},
		{"empty feed", "GET", "feed=&actor=" + string(alice), 400, invalid, "feed is required"},
		{"unknown feed", "GET", "feed=nope&actor=" + string(alice), 400, invalid, "unknown feed"},
		{"feed name case", "GET", "feed=Following&actor=" + string(alice), 400, invalid, "unknown feed"},
		{"no actor", "GET", "feed=following", 400, invalid, "actor is required"},
		{"empty actor", "GET", "feed=following&actor=", 400, invalid, "actor is required"},
		{"handle", "GET", "feed=following&actor=alice.example.com", 400, invalid, "actor must be a DID: this server does not resolve handles"},
		{"at-handle", "GET", "feed=following&actor=@alice.example.com", 400, invalid, "actor must be a DID or a handle"},
		{"garbage actor", "GET", "feed=following&actor=%00%ff", 400, invalid, "actor must be a DID or a handle"},
		{"at-uri actor", "GET", "feed=following&actor=at://" + string(alice), 400, invalid, "actor must be a DID or a handle"},
		{"100 KB actor", "GET", "feed=following&actor=did:plc:" + strings.Repeat("a", 100_000), 400, invalid, "actor must be a DID or a handle"},
		{"bad collection", "GET", good + "&collection=posts", 400, invalid, "collection must be an NSID"},
		{"foreign collection", "GET", good + "&collection=app.bsky.graph.follow", 400, invalid, "collection is not part of this feed"},
		{"collection of another feed", "GET", "feed=mutuals&actor=" + string(alice) + "&collection=app.bsky.feed.repost", 400, invalid, "collection is not part of this feed"},
		{"limit 0", "GET", good + "&limit=0", 400, invalid, badLimit},
		{"limit 101", "GET", good + "&limit=101", 400, invalid, badLimit},
		{"limit negative", "GET", good + "&limit=-1", 400, invalid, badLimit},
		{"limit word", "GET", good + "&limit=ten", 400, invalid, badLimit},
		{"limit float", "GET", good + "&limit=1.5", 400, invalid, badLimit},
		{"limit spaced", "GET", good + "&limit=%2010", 400, invalid, badLimit},
		{"limit huge", "GET", good + "&limit=99999999999999999999999", 400, invalid, badLimit},
		{"repeated actor", "GET", good + "&actor=" + string(bob), 400, invalid, "parameter actor must not be repeated"},
		{"repeated feed", "GET", good + "&feed=following", 400, invalid, "parameter feed must not be repeated"},
		{"repeated limit", "GET", good + "&limit=1&limit=2", 400, invalid, "parameter limit must not be repeated"},
		{"profiles word", "GET", good + "&profiles=yes", 400, invalid, "profiles must be true or false"},
		{"profiles 1", "GET", good + "&profiles=1", 400, invalid, "profiles must be true or false"},
		{"profiles case", "GET", good + "&profiles=True", 400, invalid, "profiles must be true or false"},
		{"repeated profiles", "GET", good + "&profiles=true&profiles=true", 400, invalid, "parameter profiles must not be repeated"},
		{"repeated cursor", "GET", good + "&cursor=" + valid + "&cursor=" + valid, 400, invalid, "parameter cursor must not be repeated"},
		{"malformed escape", "GET", good + "&limit=%zz", 400, invalid, "malformed query string"},
		{"semicolon", "GET", good + ";limit=5", 400, invalid, "malformed query string"},
		{"garbage cursor", "GET", good + "&cursor=hello", 400, invalid, badCursor},
		{"tampered cursor", "GET", good + "&cursor=" + string(tampered), 400, invalid, badCursor},
		{"padded cursor", "GET", good + "&cursor=" + url.QueryEscape(valid+"=="), 400, invalid, badCursor},
		{"truncated cursor", "GET", good + "&cursor=" + valid[:len(valid)-1], 400, invalid, badCursor},
		{"cursor of another actor", "GET", good + "&cursor=" + otherActor, 400, invalid, badCursor},
		{"cursor of another feed", "GET", good + "&cursor=" + otherFeed, 400, invalid, badCursor},
		{"cursor of another collection", "GET", good + "&cursor=" + otherCollection, 400, invalid, badCursor},
		{"cursor too long", "GET", good + "&cursor=" + strings.Repeat("A", 3000), 400, invalid, badCursor},
		{"unfiltered cursor under a filter", "GET", good + "&langs=en&cursor=" + valid, 400, invalid, badCursor},
		{"filtered cursor without the filter", "GET", good + "&cursor=" + filtered, 400, invalid, badCursor},
		{"filtered cursor under another value", "GET", good + "&langs=pt&cursor=" + filtered, 400, invalid, badCursor},
		{"repeated filter", "GET", good + "&langs=en&langs=pt", 400, invalid, "parameter langs must not be repeated"},
		{"repeated range bound", "GET", good + "&createdAtMin=2024-01-01T00:00:00Z&createdAtMin=2024-01-02T00:00:00Z", 400, invalid, "parameter createdAtMin must not be repeated"},
		{"bad datetime", "GET", good + "&createdAtMin=yesterday", 400, invalid, "invalid createdAtMin: bad field value: want a datetime such as 2024-01-02T15:04:05Z"},
		{"integer for a datetime", "GET", good + "&createdAtMax=1700000000", 400, invalid, "invalid createdAtMax: bad field value: want a datetime such as 2024-01-02T15:04:05Z"},
		{"empty range", "GET", good + "&createdAtMin=2024-02-01T00:00:00Z&createdAtMax=2024-01-01T00:00:00Z", 400, invalid, "createdAtMin must not exceed createdAtMax"},
		{"long filter value", "GET", good + "&langs=" + strings.Repeat("x", 257), 400, invalid, "invalid langs: bad field value: want 1 to 256 bytes of UTF-8"},
		{"range suffix on an equality field", "GET", good + "&langsMin=en", 200, "", ""},
		{"filter of another collection", "GET", good + "&subject=at://x", 400, invalid, "parameter subject is not a filter of collection app.bsky.feed.post"},
		{"posts filter on reposts", "GET", good + "&collection=app.bsky.feed.repost&langs=en", 400, invalid, "parameter langs is not a filter of collection app.bsky.feed.repost"},
		{"filter on a feed without filters", "GET", "feed=mutuals&actor=" + string(alice) + "&langs=en", 200, "", ""},
		{"POST", "POST", good, 405, "MethodNotAllowed", "XRPC queries must use GET"},
		{"PUT", "PUT", good, 405, "MethodNotAllowed", "XRPC queries must use GET"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := do(t, tt.method, base+getFeedURL+"?"+tt.query)
			if res.Status != tt.status {
				t.Fatalf("status %d, want %d; body %.300s", res.Status, tt.status, res.Body)
			}
			if tt.status == http.StatusOK {
				return // an unknown parameter, ignored as XRPC servers do
			}
			env := decodeEnvelope(t, res.Body)
			if env.Error != tt.errName || env.Message != tt.message {
				t.Errorf("got %s: %q, want %s: %q", env.Error, env.Message, tt.errName, tt.message)
			}
			if res := do(t, http.MethodGet, base+getFeedURL+"?"+good+"&cursor="+valid); res.Status != http.StatusOK {
				t.Errorf("good request after: status %d, body %s", res.Status, res.Body)
			}
			if q := r.lastQuery(t); q.Before == nil || *q.Before != key {
				t.Errorf("good request after: reader got Before %v, want %v", q.Before, key)
			}
		})
	}
}

// FuzzGetFeedParams feeds arbitrary query strings to getFeed: the answer
// is a 200 with records or a 400 InvalidRequest envelope, never a 5xx or a
// panic.
func FuzzGetFeedParams(f *testing.F) {
	r := goldenReader()
	s := NewServer(testConfig(r))
	h := s.Handler()
	valid := encodeCursor(cursorScope{Feed: "following", Actor: alice, Collection: posts},
		feeds.PageKey{SortUS: 1795975616991124, RecordID: 12})
	for _, seed := range []string{
		"",
		"feed=following&actor=" + string(alice),
		"feed=following&actor=" + string(alice) + "&limit=1&cursor=" + valid,
		"feed=following&actor=" + string(alice) + "&collection=app.bsky.feed.repost&limit=100",
		"feed=mutuals&actor=did:web:example.com&limit=0",
		"feed=following&actor=alice.bsky.social",
		"feed=following&feed=following&actor=" + string(alice),
		"feed=following&actor=" + string(alice) + "&cursor=" + valid[:10],
		"feed=%zz;&&==&actor",
		"feed=following&actor=did:plc:%00&limit=%2B5",
		"feed=following&actor=" + string(alice) + "&langs=en&createdAtMin=2024-01-01T00:00:00Z&createdAtMax=2024-01-01T00:00:00.5+01:00",
		"feed=following&actor=" + string(alice) + "&collection=app.bsky.feed.repost&subject=at://x&langs=",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, rawQuery string) {
		req := httptest.NewRequest(http.MethodGet, getFeedURL, nil)
		req.URL.RawQuery = rawQuery
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		body := rec.Body.Bytes()
		switch rec.Code {
		case http.StatusOK:
			var out struct {
				Records []json.RawMessage `json:"records"`
			}
			if err := json.Unmarshal(body, &out); err != nil || out.Records == nil {
				t.Fatalf("200 with body %q: %v", body, err)
			}
		case http.StatusBadRequest:
			var env envelope
			if err := json.Unmarshal(body, &env); err != nil || env.Error != "InvalidRequest" || env.Message == "" {
				t.Fatalf("400 with body %q: %v", body, err)
			}
		default:
			t.Fatalf("status %d for query %q: %s", rec.Code, rawQuery, body)
		}
	})
}

// A page larger than net/http's 2 KiB buffer carries its length and goes
// out whole: it was sent chunked, a write more on the connection.
func TestGetFeedAnswersWithItsLength(t *testing.T) {
	r := newFakeReader()
	var items []feeds.Item
	for i := range 50 {
		items = append(items, postItem(bob, fmt.Sprintf("3l%010dz", i), int64(1795975616000000-i), int64(100-i),
			`{"$type":"app.bsky.feed.post","createdAt":"2026-11-30T12:00:00Z","text":"`+strings.Repeat("x", 200)+`"}`))
	}
	r.add(cursorScope{Feed: "following", Actor: alice, Collection: posts}, items...)
	base := serve(t, testConfig(r))
	res, err := http.Get(base + getFeedURL + "?feed=following&actor=" + string(alice) + "&limit=50")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var page struct{ Records []json.RawMessage }
	if err := json.NewDecoder(res.Body).Decode(&page); err != nil || len(page.Records) != 50 {
		t.Fatalf("page: %d records, %v", len(page.Records), err)
	}
	if res.ContentLength < 10_000 || len(res.TransferEncoding) != 0 {
		t.Errorf("Content-Length %d, Transfer-Encoding %v: want the length of a page of 50 and no chunking", res.ContentLength, res.TransferEncoding)
	}
}
