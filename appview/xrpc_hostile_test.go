package appview

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

const (
	getFeedPath = "/xrpc/com.example.appview.getFeed"
	repostNSID  = "app.bsky.feed.repost"
)

// hostileDaemon is a daemon in its public mode (index_all off, first reads
// from the PDS) with two feeds, and a few viewers whose first reads are
// done: alice and bob read "following" (posts and reposts), alice also
// reads "second" (posts only).
type hostileDaemon struct {
	*testDaemon
	alice, bob string
	// cursors of real pages, to replay where they do not belong.
	valid, otherActor, otherFeed, otherCollection string
	// goodQuery reads alice's second page; goodPage is what it answered.
	goodQuery string
	goodPage  []string
}

func startHostileDaemon(t *testing.T) *hostileDaemon {
	t.Helper()
	n := newNetwork(t)
	alice, bob, carol := n.account("alice"), n.account("bob"), n.account("carol")
	n.pdsFollow(alice, carol, "3kfollowcarol")
	n.pdsFollow(bob, carol, "3kfollowcarol")
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	for i := range 4 {
		at := base.Add(time.Duration(i) * time.Minute)
		n.pdsPost(carol, rkeyAt(at), at)
		n.pds.AddRecord(syntax.DID(carol), repostNSID, syntax.RecordKey(rkeyAt(at.Add(time.Second))), fmt.Sprintf(
			`{"$type":"app.bsky.feed.repost","subject":{"uri":"at://%s/app.bsky.feed.post/%s","cid":"bafyreigwuiotmkaytriom4alrxkamtlzsf35xljotttx6oy3hd63xuxyyq"},"createdAt":%q}`,
			carol, rkeyAt(at), at.Add(time.Second).UTC().Format(time.RFC3339)))
	}
	cfg := n.config(t)
	cfg.Feeds = []FeedConfig{
		{Name: "following", FollowCollection: followNSID, MergeLimit: 100,
			Targets: []TargetConfig{{Collection: postNSID, Cap: 200}, {Collection: repostNSID, Cap: 200}}},
		{Name: "second", FollowCollection: followNSID, MergeLimit: 100,
			Targets: []TargetConfig{{Collection: postNSID, Cap: 200}}},
	}
	h := &hostileDaemon{testDaemon: startDaemon(t, n.js, cfg), alice: alice, bob: bob}

	firstPage := func(feed, actor, collection string) string {
		q := url.Values{"feed": {feed}, "actor": {actor}, "limit": {"1"}}
		if collection != "" {
			q.Set("collection", collection)
		}
		var page feedResponse
		h.getJSON(t, getFeedPath+"?"+q.Encode(), &page)
		if page.Cursor == "" || len(page.Records) != 1 {
			t.Fatalf("first page of %s %s %s: %+v", feed, actor, collection, page)
		}
		return page.Cursor
	}
	h.valid = firstPage("following", alice, "")
	h.otherActor = firstPage("following", bob, "")
	h.otherFeed = firstPage("second", alice, "")
	h.otherCollection = firstPage("following", alice, repostNSID)
	h.goodQuery = "feed=following&limit=2&actor=" + alice + "&cursor=" + h.valid
	var page feedResponse
	h.getJSON(t, getFeedPath+"?"+h.goodQuery, &page)
	for _, r := range page.Records {
		h.goodPage = append(h.goodPage, r.RKey)
	}
	if len(h.goodPage) != 2 {
		t.Fatalf("good page %v", h.goodPage)
	}
	return h
}

// checkGood asserts that the daemon still answers the good request with
// the same page.
func (h *hostileDaemon) checkGood(t *testing.T) {
	t.Helper()
	var page feedResponse
	h.getJSON(t, getFeedPath+"?"+h.goodQuery, &page)
	var got []string
	for _, r := range page.Records {
		got = append(got, r.RKey)
	}
	if !slices.Equal(got, h.goodPage) {
		t.Errorf("good request after: %v, want %v", got, h.goodPage)
	}
}

type hostileRequest struct {
	name    string
	method  string
	target  string // path and query
	header  http.Header
	body    string
	status  int
	errName string
	// message, when set, must appear in the envelope's message.
	message string
}

// xrpcAnswer is one response, checked for the shape every answer of the
// router must have.
type xrpcAnswer struct {
	status int
	header http.Header
	body   []byte
	env    struct{ Error, Message string }
}

func (h *hostileDaemon) send(t *testing.T, client *http.Client, r hostileRequest) xrpcAnswer {
	t.Helper()
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	method := r.method
	if method == "" {
		method = http.MethodGet
	}
	req, err := http.NewRequest(method, h.base+r.target, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range r.header {
		req.Header[k] = vs
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", r.name, err)
	}
	defer res.Body.Close()
	a := xrpcAnswer{status: res.StatusCode, header: res.Header}
	if a.body, err = io.ReadAll(res.Body); err != nil {
		t.Fatalf("%s: read body: %v", r.name, err)
	}
	return a
}

// checkEnvelope asserts what every error answer of the router looks like:
// JSON, exactly {"error","message"}, no HTML, no stack trace, and a 4xx
// (a 501 for a method we do not serve, a 429 or 503 only with
// Retry-After).
func checkEnvelope(t *testing.T, method string, a *xrpcAnswer) {
	t.Helper()
	switch {
	case a.status == http.StatusTooManyRequests || a.status == http.StatusServiceUnavailable:
		if a.header.Get("Retry-After") == "" {
			t.Errorf("%d without Retry-After", a.status)
		}
	case a.status == http.StatusNotImplemented:
	case a.status < 400 || a.status > 499:
		t.Errorf("status %d is not a 4xx: %.300s", a.status, a.body)
	}
	if method == http.MethodHead {
		return // no body to look at
	}
	if ct := a.header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	dec := json.NewDecoder(strings.NewReader(string(a.body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a.env); err != nil || a.env.Error == "" || a.env.Message == "" {
		t.Errorf("body %.300q is not an XRPC envelope: %v", a.body, err)
	}
	lower := strings.ToLower(string(a.body))
	for _, leak := range []string{"<html", "goroutine", ".go:", "panic", "sql"} {
		if strings.Contains(lower, leak) {
			t.Errorf("body leaks %q: %.300s", leak, a.body)
		}
	}
	if len(a.body) > 1024 {
		t.Errorf("error body of %d bytes echoes too much input", len(a.body))
	}
}

// TestHostileRequests sends a battery of malformed requests to a real
// daemon on loopback. Each is answered with a 4xx (501 for an unknown
// method) and an XRPC envelope, and the daemon answers a good request
// with the same page after each.
func TestHostileRequests(t *testing.T) {
	h := startHostileDaemon(t)
	alice := h.alice
	good := "feed=following&actor=" + alice
	tampered := func(c string, i int) string {
		raw, err := base64.RawURLEncoding.DecodeString(c)
		if err != nil {
			t.Fatal(err)
		}
		raw[i] ^= 0x01
		return base64.RawURLEncoding.EncodeToString(raw)
	}
	big := strings.Repeat("a", 100_000)

	const (
		invalid   = "InvalidRequest"
		badLimit  = "limit must be an integer from 1 to 100"
		badCursor = "invalid cursor"
		badActor  = "actor must be a DID or a handle"
	)
	get := func(name, query string, status int, errName, message string) hostileRequest {
		return hostileRequest{name: name, target: getFeedPath + "?" + query, status: status, errName: errName, message: message}
	}
	tests := []hostileRequest{
		// Missing, empty, duplicated and oversized parameters.
		get("no query", "", 400, invalid, "feed is required"),
		get("no feed", "actor="+alice, 400, invalid, "feed is required"),
		get("no actor", "feed=following", 400, invalid, "actor is required"),
		get("empty actor", "feed=following&actor=", 400, invalid, "actor is required"),
		get("repeated feed", good+"&feed=following", 400, invalid, "parameter feed must not be repeated"),
		get("repeated actor", good+"&actor="+h.bob, 400, invalid, "parameter actor must not be repeated"),
		get("repeated collection", good+"&collection="+postNSID+"&collection="+postNSID, 400, invalid, "parameter collection must not be repeated"),
		get("repeated limit", good+"&limit=5&limit=5", 400, invalid, "parameter limit must not be repeated"),
		get("repeated cursor", good+"&cursor="+h.valid+"&cursor="+h.valid, 400, invalid, "parameter cursor must not be repeated"),
		get("100 KB DID actor", "feed=following&actor=did:plc:"+big, 400, invalid, badActor),
		get("100 KB handle actor", "feed=following&actor="+big+".test", 400, invalid, badActor),
		get("100 KB feed", "feed="+big+"&actor="+alice, 400, invalid, "unknown feed"),
		get("100 KB collection", good+"&collection=app.bsky."+big, 400, invalid, "collection must be an NSID"),
		get("100 KB limit", good+"&limit="+strings.Repeat("9", 100_000), 400, invalid, badLimit),
		get("100 KB cursor", good+"&cursor="+big, 400, invalid, badCursor),
		get("malformed escape", good+"&limit=%zz", 400, invalid, "malformed query string"),
		get("semicolon", good+";limit=5", 400, invalid, "malformed query string"),

		// limit not a number, out of range.
		get("limit 0", good+"&limit=0", 400, invalid, badLimit),
		get("limit 101", good+"&limit=101", 400, invalid, badLimit),
		get("limit -1", good+"&limit=-1", 400, invalid, badLimit),
		get("limit word", good+"&limit=ten", 400, invalid, badLimit),
		get("limit float", good+"&limit=2.0", 400, invalid, badLimit),
		get("limit exponent", good+"&limit=1e2", 400, invalid, badLimit),
		get("limit hex", good+"&limit=0x10", 400, invalid, badLimit),
		get("limit overflow", good+"&limit=18446744073709551617", 400, invalid, badLimit),
		get("limit NUL", good+"&limit=5%00", 400, invalid, badLimit),

		// Garbage and tampered cursors; real cursors out of their scope.
		get("garbage cursor", good+"&cursor=hello", 400, invalid, badCursor),
		get("cursor with base64 padding", good+"&cursor="+url.QueryEscape(h.valid+"=="), 400, invalid, badCursor),
		get("cursor standard base64", good+"&cursor="+url.QueryEscape(strings.NewReplacer("-", "+", "_", "/").Replace(h.valid)+"+/"), 400, invalid, badCursor),
		get("truncated cursor", good+"&cursor="+h.valid[:len(h.valid)-2], 400, invalid, badCursor),
		get("cursor version bit", good+"&cursor="+tampered(h.valid, 0), 400, invalid, badCursor),
		get("cursor sort key bit", good+"&cursor="+tampered(h.valid, 8), 400, invalid, badCursor),
		get("cursor record id bit", good+"&cursor="+tampered(h.valid, 16), 400, invalid, badCursor),
		get("cursor check bit", good+"&cursor="+tampered(h.valid, 24), 400, invalid, badCursor),
		get("cursor of another actor", good+"&cursor="+h.otherActor, 400, invalid, badCursor),
		get("cursor of another feed", good+"&cursor="+h.otherFeed, 400, invalid, badCursor),
		get("cursor of another collection", good+"&cursor="+h.otherCollection, 400, invalid, badCursor),
		get("cursor for its own feed, other collection asked", good+"&collection="+repostNSID+"&cursor="+h.valid, 400, invalid, badCursor),
		get("cursor with a handle actor", "feed=following&actor=alice.test&cursor="+h.otherActor, 400, invalid, badCursor),

		// Invalid handles and DIDs; a valid handle nobody claims.
		get("bare word", "feed=following&actor=alice", 400, invalid, badActor),
		get("at-handle", "feed=following&actor=@alice.test", 400, invalid, badActor),
		get("handle double dot", "feed=following&actor=alice..test", 400, invalid, badActor),
		get("handle leading hyphen", "feed=following&actor=-alice.test", 400, invalid, badActor),
		get("handle trailing hyphen", "feed=following&actor=alice-.test", 400, invalid, badActor),
		get("handle numeric TLD", "feed=following&actor=alice.123", 400, invalid, badActor),
		get("handle unicode", "feed=following&actor="+url.QueryEscape("аlice.test"), 400, invalid, badActor),
		get("handle too long", "feed=following&actor="+strings.Repeat("a.", 130)+"test", 400, invalid, badActor),
		get("handle NUL", "feed=following&actor=alice.test%00", 400, invalid, badActor),
		get("did no method", "feed=following&actor=did::abc", 400, invalid, badActor),
		get("did empty id", "feed=following&actor=did:plc:", 400, invalid, badActor),
		get("did upper method", "feed=following&actor=did:PLC:abc", 400, invalid, badActor),
		get("did upper scheme", "feed=following&actor=DID:plc:abc", 400, invalid, badActor),
		get("did trailing colon", "feed=following&actor=did:plc:abc:", 400, invalid, badActor),
		get("did path", "feed=following&actor="+url.QueryEscape("did:plc:abc/def"), 400, invalid, badActor),
		get("did fragment", "feed=following&actor="+url.QueryEscape("did:web:example.com#atproto"), 400, invalid, badActor),
		get("did space", "feed=following&actor=did:plc:a+b", 400, invalid, badActor),
		get("at-uri", "feed=following&actor="+url.QueryEscape("at://"+alice), 400, invalid, badActor),
		get("unknown handle", "feed=following&actor=nobody.test", 400, "ActorNotFound", "could not resolve actor"),
		get("reserved TLD handle", "feed=following&actor=alice.local", 400, "ActorNotFound", "could not resolve actor"),

		// Unknown feeds and collections.
		get("unknown feed", "feed=nope&actor="+alice, 400, invalid, "unknown feed"),
		get("feed name case", "feed=Following&actor="+alice, 400, invalid, "unknown feed"),
		get("feed SQL", "feed="+url.QueryEscape("following' OR '1'='1")+"&actor="+alice, 400, invalid, "unknown feed"),
		get("feed path", "feed=..%2Ffollowing&actor="+alice, 400, invalid, "unknown feed"),
		get("collection not an NSID", good+"&collection=posts", 400, invalid, "collection must be an NSID"),
		get("collection SQL", good+"&collection="+url.QueryEscape("app.bsky.feed.post'--"), 400, invalid, "collection must be an NSID"),
		get("collection of no feed", good+"&collection=app.bsky.feed.like", 400, invalid, "collection is not part of this feed"),
		get("follow collection", good+"&collection="+followNSID, 400, invalid, "collection is not part of this feed"),
		get("collection of another feed", "feed=second&actor="+alice+"&collection="+repostNSID, 400, invalid, "collection is not part of this feed"),

		// Wrong HTTP methods, bodies where none belong.
		{name: "POST", method: "POST", target: getFeedPath + "?" + good, status: 405, errName: "MethodNotAllowed"},
		{name: "POST JSON body", method: "POST", target: getFeedPath, header: http.Header{"Content-Type": {"application/json"}},
			body: `{"feed":"following","actor":"` + alice + `"}`, status: 405, errName: "MethodNotAllowed"},
		{name: "PUT", method: "PUT", target: getFeedPath + "?" + good, status: 405, errName: "MethodNotAllowed"},
		{name: "DELETE", method: "DELETE", target: getFeedPath + "?" + good, status: 405, errName: "MethodNotAllowed"},
		{name: "PATCH", method: "PATCH", target: getFeedPath + "?" + good, status: 405, errName: "MethodNotAllowed"},
		{name: "OPTIONS", method: "OPTIONS", target: getFeedPath + "?" + good, status: 405, errName: "MethodNotAllowed"},
		{name: "HEAD", method: "HEAD", target: getFeedPath + "?" + good, status: 405},
		{name: "made-up method", method: "BREW", target: getFeedPath + "?" + good, status: 405, errName: "MethodNotAllowed"},
		{name: "POST health", method: "POST", target: "/xrpc/_health", status: 405, errName: "MethodNotAllowed"},
		{name: "POST readyz", method: "POST", target: "/readyz", status: 405, errName: "MethodNotAllowed"},
		{name: "GET with a body", target: getFeedPath + "?" + good, body: "hello", status: 400, errName: invalid, message: "body"},
		{name: "GET with a JSON body", target: getFeedPath + "?" + good, header: http.Header{"Content-Type": {"application/json"}},
			body: `{"limit":1}`, status: 400, errName: invalid, message: "body"},

		// Unknown XRPC methods and paths.
		get("unknown method", "", 501, "MethodNotImplemented", "").with("/xrpc/app.bsky.feed.getTimeline"),
		get("unserved method in our namespace", "", 501, "MethodNotImplemented", "").with("/xrpc/com.example.appview.getPosts"),
		get("method name case", "feed=following&actor="+alice, 501, "MethodNotImplemented", "").with("/xrpc/com.example.appview.getfeed"),
		get("huge method name", "", 501, "MethodNotImplemented", "").with("/xrpc/com.example." + big),
		get("invalid UTF-8 method", "", 501, "MethodNotImplemented", "").with("/xrpc/%ff%fe%00"),
		get("dot-dot method", "", 501, "MethodNotImplemented", "").with("/xrpc/..%2f..%2fetc%2fpasswd"),
		{name: "POST unknown procedure", method: "POST", target: "/xrpc/com.example.appview.putPosts", body: `{"hostname":"x"}`,
			status: 501, errName: "MethodNotImplemented"},
		get("unknown path", "", 404, "NotFound", "").with("/nope"),
		get("unknown lexicon", "", 404, "NotFound", "").with("/lexicons/app.bsky.feed.post.json"),
		get("lexicon traversal", "", 404, "NotFound", "").with("/lexicons/..%2F..%2Fgo.mod"),

		// Headers: a 200 KB header still reaches the router (the limit is
		// 256 KiB); the rate-limit key is the peer, never a header.
		{name: "200 KB header, bad limit", target: getFeedPath + "?" + good + "&limit=0",
			header: http.Header{"X-Junk": {strings.Repeat("j", 200_000)}}, status: 400, errName: invalid, message: badLimit},
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := h.send(t, client, tt)
			if a.status != tt.status {
				t.Fatalf("status %d, want %d: %.300s", a.status, tt.status, a.body)
			}
			checkEnvelope(t, tt.method, &a)
			if tt.errName != "" && a.env.Error != tt.errName {
				t.Errorf("error %q, want %q (%s)", a.env.Error, tt.errName, a.env.Message)
			}
			if !strings.Contains(a.env.Message, tt.message) {
				t.Errorf("message %q, want it to contain %q", a.env.Message, tt.message)
			}
			if a.status == 405 && a.header.Get("Allow") == "" {
				t.Error("405 without Allow")
			}
			h.checkGood(t)
		})
	}

	// Odd but well-formed requests are answered normally.
	for _, tt := range []hostileRequest{
		get("unknown parameter", good+"&foo=bar", 200, "", ""),
		get("100 KB unknown parameter", good+"&junk="+big, 200, "", ""),
		get("empty limit takes the default", good+"&limit=", 200, "", ""),
		get("handle actor", "feed=following&actor=ALICE.test", 200, "", ""),
		get("collection authority case", good+"&collection=APP.BSKY.feed.post", 200, "", ""),
		{name: "explicit empty body", target: getFeedPath + "?" + good, header: http.Header{"Content-Length": {"0"}}, status: 200},
		{name: "200 KB header", target: getFeedPath + "?" + good, header: http.Header{"X-Junk": {strings.Repeat("j", 200_000)}}, status: 200},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := h.send(t, client, tt)
			if a.status != 200 {
				t.Fatalf("status %d: %.300s", a.status, a.body)
			}
			var page feedResponse
			if err := json.Unmarshal(a.body, &page); err != nil || page.Records == nil {
				t.Fatalf("body %.300s: %v", a.body, err)
			}
		})
	}
	h.checkGood(t)
}

// with replaces the request's path, keeping its query.
func (r hostileRequest) with(path string) hostileRequest {
	_, query, _ := strings.Cut(r.target, "?")
	r.target = path
	if query != "" {
		r.target += "?" + query
	}
	return r
}

// TestHostileRequestsBeforeRouting: what Go's HTTP server refuses itself,
// before any routing (a header block over the limit, a broken request
// line), gets its plain 4xx; nothing is a 5xx and the daemon serves on.
func TestHostileRequestsBeforeRouting(t *testing.T) {
	h := startHostileDaemon(t)
	addr := strings.TrimPrefix(h.base, "http://")
	target := getFeedPath + "?feed=following&actor=" + h.alice
	tests := []struct {
		name   string
		raw    string
		status int
	}{
		{"header block over 256 KiB", "GET " + target + " HTTP/1.1\r\nHost: x\r\nX-Junk: " + strings.Repeat("j", 300_000) + "\r\n\r\n", 431},
		{"query over 256 KiB", "GET " + target + "&junk=" + strings.Repeat("j", 300_000) + " HTTP/1.1\r\nHost: x\r\n\r\n", 431},
		{"broken request line", "GET\r\nHost: x\r\n\r\n", 400},
		{"bad HTTP version", "GET " + target + " HTTP/9.9\r\nHost: x\r\n\r\n", 505},
		{"no Host", "GET " + target + " HTTP/1.1\r\n\r\n", 400},
		{"two Content-Lengths", "GET " + target + " HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400},
		{"CL and TE", "GET " + target + " HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
		{"control character in path", "GET /xrpc/\x01 HTTP/1.1\r\nHost: x\r\n\r\n", 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := rawExchange(t, addr, tt.raw)
			if status != tt.status {
				t.Errorf("status %d, want %d: %.200s", status, tt.status, body)
			}
			h.checkGood(t)
		})
	}
}

// rawExchange writes raw on a fresh connection and reads one response.
func rawExchange(t *testing.T, addr, raw string) (int, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		// Concurrently: the server may answer, and stop reading, before a
		// large request is all written.
		defer wg.Done()
		io.WriteString(conn, raw)
	}()
	defer wg.Wait()
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, body
}

// TestHostileFirstReadBurst: one client asking for many new viewers at
// once, each request claiming another X-Forwarded-For, gets 200s until
// its bucket is empty and then 429 RateLimitExceeded with Retry-After;
// the forged header changes nothing, no answer is a 5xx, and existing
// viewers are served throughout.
func TestHostileFirstReadBurst(t *testing.T) {
	h := startHostileDaemon(t)
	client := &http.Client{Timeout: 20 * time.Second}
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := h.send(t, client, hostileRequest{
				name:   fmt.Sprint("burst ", i),
				target: getFeedPath + fmt.Sprintf("?feed=following&actor=did:plc:stranger%d", i),
				header: http.Header{"X-Forwarded-For": {fmt.Sprintf("203.0.113.%d", i)}, "X-Real-Ip": {fmt.Sprintf("198.51.100.%d", i)}},
			})
			mu.Lock()
			codes[a.status]++
			mu.Unlock()
			if a.status != 200 {
				checkEnvelope(t, "GET", &a)
				if a.status != 429 || a.env.Error != "RateLimitExceeded" {
					t.Errorf("status %d %s, want 200 or 429 RateLimitExceeded", a.status, a.env.Error)
				}
			}
		}()
		if i%10 == 0 {
			h.checkGood(t)
		}
	}
	wg.Wait()
	// The bucket holds 10; three went to the setup's first reads.
	if codes[429] < 40 || codes[200]+codes[429] != 60 {
		t.Errorf("status codes %v, want mostly 429s and nothing but 200s and 429s", codes)
	}
	h.checkGood(t)
}
