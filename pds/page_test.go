package pds

import (
	"errors"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/atfeeds/appview/pds/pdstest"
)

func TestDecodePageSkipRules(t *testing.T) {
	okCID := pdstest.FakeCID([]byte("x"))
	uri := "at://" + alice.String() + "/" + posts.String() + "/3kaaaaaaaab22"
	for name, tc := range map[string]struct {
		record string
		keep   bool
	}{
		"valid":              {`{"uri":"` + uri + `","cid":"` + okCID + `","value":` + post("hi") + `}`, true},
		"extra fields":       {`{"uri":"` + uri + `","cid":"` + okCID + `","value":` + post("hi") + `,"x":[1]}`, true},
		"other repo":         {`{"uri":"at://` + bob.String() + `/app.bsky.feed.post/3kaaaaaaaab22","cid":"` + okCID + `","value":` + post("x") + `}`, false},
		"handle authority":   {`{"uri":"at://alice.test/app.bsky.feed.post/3kaaaaaaaab22","cid":"` + okCID + `","value":` + post("x") + `}`, false},
		"other collection":   {`{"uri":"at://` + alice.String() + `/app.bsky.feed.like/3kaaaaaaaab22","cid":"` + okCID + `","value":` + post("x") + `}`, false},
		"no rkey":            {`{"uri":"at://` + alice.String() + `/app.bsky.feed.post","cid":"` + okCID + `","value":` + post("x") + `}`, false},
		"bad uri":            {`{"uri":"https://example.com/x","cid":"` + okCID + `","value":` + post("x") + `}`, false},
		"uri not a string":   {`{"uri":5,"cid":"` + okCID + `","value":` + post("x") + `}`, false},
		"no cid":             {`{"uri":"` + uri + `","value":` + post("x") + `}`, false},
		"bad cid":            {`{"uri":"` + uri + `","cid":"not a cid!","value":` + post("x") + `}`, false},
		"value array":        {`{"uri":"` + uri + `","cid":"` + okCID + `","value":[]}`, false},
		"value null":         {`{"uri":"` + uri + `","cid":"` + okCID + `","value":null}`, false},
		"value string":       {`{"uri":"` + uri + `","cid":"` + okCID + `","value":"{}"}`, false},
		"no value":           {`{"uri":"` + uri + `","cid":"` + okCID + `"}`, false},
		"no $type":           {`{"uri":"` + uri + `","cid":"` + okCID + `","value":{"text":"x"}}`, false},
		"other $type":        {`{"uri":"` + uri + `","cid":"` + okCID + `","value":{"$type":"app.bsky.feed.like"}}`, false},
		"$type not a string": {`{"uri":"` + uri + `","cid":"` + okCID + `","value":{"$type":["app.bsky.feed.post"]}}`, false},
		"record is a number": {`7`, false},
		"value not UTF-8":    {`{"uri":"` + uri + `","cid":"` + okCID + `","value":` + post("caf\xe9") + `}`, false},
		"key not UTF-8":      {`{"uri":"` + uri + `","cid":"` + okCID + `","value":{"$type":"app.bsky.feed.post","` + "\xff" + `":1}}`, false},
		"value UTF-8":        {`{"uri":"` + uri + `","cid":"` + okCID + `","value":` + post("café ☀ \\ud83d\\ude00") + `}`, true},
		// Served byte for byte, a lone surrogate escape breaks strict
		// clients' parse of the whole page.
		"lone high surrogate": {`{"uri":"` + uri + `","cid":"` + okCID + `","value":` + post("x \\ud83d y") + `}`, false},
		"lone low surrogate":  {`{"uri":"` + uri + `","cid":"` + okCID + `","value":` + post("\\ude00") + `}`, false},
	} {
		t.Run(name, func(t *testing.T) {
			page, err := decodePage([]byte(`{"records":[`+tc.record+`],"cursor":"c"}`), alice, posts, MaxLimit)
			if err != nil {
				t.Fatalf("page failed: %v", err)
			}
			if kept := len(page.Records) == 1; kept != tc.keep || page.Skipped+len(page.Records) != 1 || page.Cursor != "c" {
				t.Fatalf("got %+v, want kept=%v", page, tc.keep)
			}
		})
	}
}

func TestDecodePageRejects(t *testing.T) {
	for name, body := range map[string]string{
		"not json":          `<html>`,
		"truncated":         `{"records":[{"uri":"at://`,
		"array":             `[]`,
		"null":              `null`,
		"no records":        `{"cursor":"abc"}`,
		"records object":    `{"records":{}}`,
		"cursor number":     `{"records":[],"cursor":5}`,
		"cursor too long":   `{"records":[],"cursor":"` + strings.Repeat("a", maxCursorBytes+1) + `"}`,
		"trailing garbage":  `{"records":[]} {}`,
		"records null only": `{"records":null}`,
	} {
		if _, err := decodePage([]byte(body), alice, posts, MaxLimit); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := decodePage([]byte(`{"records":[],"cursor":"`+strings.Repeat("a", maxCursorBytes+1)+`"}`), alice, posts, MaxLimit); !errors.Is(err, ErrCursorTooLong) {
		t.Errorf("long cursor: %v, want ErrCursorTooLong", err)
	}
	page, err := decodePage([]byte(`{"records":[],"cursor":"`+strings.Repeat("a", maxCursorBytes)+`"}`), alice, posts, MaxLimit)
	if err != nil || len(page.Cursor) != maxCursorBytes {
		t.Fatalf("cursor at the limit: %v", err)
	}
	page, err = decodePage([]byte(`{"records":[]}`), alice, posts, MaxLimit)
	if err != nil || page.Cursor != "" || len(page.Records) != 0 {
		t.Fatalf("empty page: %+v %v", page, err)
	}
}

func TestClassify(t *testing.T) {
	env := func(name, msg string) []byte { return []byte(`{"error":"` + name + `","message":"` + msg + `"}`) }
	for _, tc := range []struct {
		status    int
		body      []byte
		hadCursor bool
		want      Kind
	}{
		{400, env("RepoNotFound", ""), false, KindRepoGone},
		{400, env("RepoDeactivated", ""), false, KindRepoGone},
		{400, env("RepoTakendown", ""), true, KindRepoGone},
		{400, env("RepoSuspended", ""), false, KindRepoGone},
		{404, env("RepoNotFound", ""), false, KindRepoGone},
		{400, env("InvalidRequest", "Could not find repo: did:plc:x"), true, KindRepoGone},
		{400, env("RecordNotFound", "Could not locate record"), false, KindNotFound},
		{404, env("NotFound", "no such record"), false, KindNotFound},
		{404, env("MethodNotImplemented", "Method Not Implemented"), false, KindUpstream}, // no PDS, or no such method
		{404, []byte("<html>"), false, KindUpstream},                                      // a proxy's, not the PDS's
		{404, nil, false, KindUpstream},
		{429, nil, false, KindRateLimited},
		{400, env("RateLimitExceeded", ""), false, KindRateLimited},
		{500, env("InternalServerError", ""), false, KindUpstream},
		{502, env("UpstreamFailure", ""), false, KindUpstream},
		{503, nil, true, KindUpstream},
		// A status that says "later" wins over a body naming a missing
		// record or repo (found by FuzzClassify).
		{429, env("RecordNotFound", ""), false, KindRateLimited},
		{429, env("RepoNotFound", ""), false, KindRateLimited},
		{500, env("RecordNotFound", ""), false, KindUpstream},
		{503, env("RepoTakendown", ""), false, KindUpstream},
		{400, env("InvalidRequest", "bad cursor"), true, KindBadCursor},
		{400, env("InvalidRequest", "bad"), false, KindRejected},
		{401, env("AuthRequired", ""), false, KindRejected},
		{304, nil, false, KindBadResponse},
		// Nor is a redirect Go did not follow a missing record or repo,
		// whatever its body says (a review).
		{304, env("RecordNotFound", ""), false, KindBadResponse},
		{302, env("RepoNotFound", ""), false, KindBadResponse},
		{204, env("RecordNotFound", ""), false, KindBadResponse},
	} {
		e := classify(tc.status, http.Header{}, tc.body, tc.hadCursor, time.Now())
		if e.Kind != tc.want || e.Status != tc.status {
			t.Errorf("%d %s cursor=%v: got %s, want %s", tc.status, tc.body, tc.hadCursor, e.Kind, tc.want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		header, value string
		want          time.Duration
	}{
		{"Retry-After", "7", 7 * time.Second},
		{"Retry-After", " 120 ", 2 * time.Minute},
		{"Retry-After", now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{"Retry-After", now.Add(-time.Hour).Format(http.TimeFormat), 0},
		{"Retry-After", "-5", 0},
		{"Retry-After", "99999999999999", maxRetryAfter},
		{"Retry-After", "soon", 0},
		{"RateLimit-Reset", "1767269100", 5 * time.Minute}, // 12:05 UTC
		{"RateLimit-Reset", "9223372036854775807", maxRetryAfter},
		{"RateLimit-Reset", "1", 0},
		{"X-Other", "5", 0},
	} {
		h := http.Header{}
		h.Set(tc.header, tc.value)
		if got := retryAfter(h, now); got != tc.want {
			t.Errorf("%s: %s: got %v, want %v", tc.header, tc.value, got, tc.want)
		}
	}
}

func TestTypeMatchIsCaseSensitive(t *testing.T) {
	okCID := pdstest.FakeCID([]byte("x"))
	body := `{"records":[{"uri":"at://` + alice.String() + `/app.bsky.feed.post/x","cid":"` + okCID + `","value":{"$TYPE":"app.bsky.feed.post"}}]}`
	page, err := decodePage([]byte(body), alice, posts, MaxLimit)
	if err != nil || page.Skipped != 1 {
		t.Fatalf("got %+v %v", page, err)
	}
}

// sizedPost returns a post value of exactly n bytes of JSON.
func sizedPost(n int) string {
	head, tail := `{"$type":"app.bsky.feed.post","text":"`, `"}`
	return head + strings.Repeat("a", n-len(head)-len(tail)) + tail
}

// TestDecodePageRecordSizeCap: a record over MaxRecordBytes is dropped and
// counted, the rest of its page kept; one at the cap is kept.
func TestDecodePageRecordSizeCap(t *testing.T) {
	body := `{"cursor":"c","records":[` + strings.Join([]string{
		rec(alice, posts, "3kaaaaaaaab22", post("small")),
		rec(alice, posts, "3kaaaaaaaac22", sizedPost(MaxRecordBytes)),
		rec(alice, posts, "3kaaaaaaaad22", sizedPost(MaxRecordBytes+1)),
		rec(alice, posts, "3kaaaaaaaae22", sizedPost(1<<20)),
		rec(alice, posts, "3kaaaaaaaaf22", post("small too")),
	}, ",") + `]}`
	page, err := decodePage([]byte(body), alice, posts, MaxLimit)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, r := range page.Records {
		kept = append(kept, r.RKey.String())
		if len(r.Value) > MaxRecordBytes {
			t.Errorf("kept %s of %d bytes", r.RKey, len(r.Value))
		}
	}
	if strings.Join(kept, " ") != "3kaaaaaaaab22 3kaaaaaaaac22 3kaaaaaaaaf22" || page.Skipped != 2 {
		t.Fatalf("kept %v, skipped %d; want b, c, f kept and 2 skipped", kept, page.Skipped)
	}
}

// TestDecodePageMemoryIsBoundedByLimit: a hostile PDS fills a 4 MiB answer
// with two-byte elements (about 2M of them). The records past the limit
// are counted, not kept, so the page costs about its own size in memory,
// not 30 times it (255 MiB before it was read token by token).
func TestDecodePageMemoryIsBoundedByLimit(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"records":[`)
	for b.Len() < defaultMaxBodyBytes-16 {
		b.WriteString(`0,`)
	}
	b.WriteString(`0],"cursor":"next"}`)
	body := []byte(b.String())
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	page, err := decodePage(body, alice, posts, MaxLimit)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	elements := strings.Count(string(body), "0")
	if len(page.Records) != 0 || page.Dropped() != elements || page.Cursor != "next" {
		t.Fatalf("page: %d records, %d dropped (want about %d), cursor %q", len(page.Records), page.Dropped(), elements, page.Cursor)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 3*uint64(len(body)) {
		t.Errorf("decoding a %d-byte page allocated %d bytes", len(body), alloc)
	}
}

// TestDecodePageTakesTheLastOfARepeatedMember: a member named twice counts
// as its last, as encoding/json decides it, and members the page does not
// use are stepped over whatever they hold.
func TestDecodePageTakesTheLastOfARepeatedMember(t *testing.T) {
	first := rec(alice, posts, "3kaaaaaaaab22", post("first"))
	last := rec(alice, posts, "3kaaaaaaaac22", post("last"))
	page, err := decodePage([]byte(`{"cursor":"a","records":[`+first+`],"x":{"records":[1,2]},"records":[`+last+`],"cursor":"b"}`), alice, posts, MaxLimit)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Records) != 1 || page.Records[0].RKey != "3kaaaaaaaac22" || page.Cursor != "b" || page.Skipped != 0 {
		t.Fatalf("got %+v", page)
	}
	page, err = decodePage([]byte(`{"records":[`+first+`],"cursor":"a","cursor":null}`), alice, posts, MaxLimit)
	if err != nil || page.Cursor != "" {
		t.Fatalf("a null cursor after a string one: %+v %v", page, err)
	}
}

// A negative Retry-After far enough from zero overflowed when made a
// duration: "-9223372037" seconds times a second wraps to about 292
// years, cut to the full 24 h cap, so a nonsense header paused the host
// for a day (every account on it) instead of being ignored like "-5";
// others wrapped to a few seconds. Negative RateLimit-Reset epochs are
// pinned beside them.
func TestANegativeRetryAfterDoesNotWrapToTheCap(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct{ header, value string }{
		{"Retry-After", "-9223372037"},
		{"Retry-After", "-9223372036854775807"},
		{"Retry-After", "-9223372036854775808"},
		{"RateLimit-Reset", "-9223372036854775808"},
		{"RateLimit-Reset", "-9000000000000000000"},
	} {
		h := http.Header{}
		h.Set(tc.header, tc.value)
		if got := retryAfter(h, now); got != 0 {
			t.Errorf("%s: %s: got %v, want 0", tc.header, tc.value, got)
		}
	}
}
