package xrpc_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/workload"
	"github.com/atfeeds/appview/xrpc"
)

// Page-read benchmarks on a real store whose feeds are at cap: 1,000
// viewers each following 20 of 200 authors who posted 10 times, so every
// feed holds exactly 200 items (the default cap).
//
//	go test ./xrpc -run '^$' -bench 'ReadFeed|GetFeed' -benchmem

const (
	benchViewers = 1000
	benchAuthors = 200
	benchFollows = 20
	benchPosts   = 10 // per author
	benchCap     = benchFollows * benchPosts
	benchLimit   = 50
)

const (
	followNSID = syntax.NSID(workload.FollowCollection)
	postNSID   = syntax.NSID(workload.PostCollection)
)

func tid(us int64) string { return string(syntax.NewTID(us, 0)) }

// capStore builds the store once per benchmark, with a record cache of
// cacheMB (0: none).
func capStore(b *testing.B, cacheMB int) (*feeds.Store, []syntax.DID) {
	b.Helper()
	ctx := context.Background()
	s, err := feeds.Open(ctx, feeds.Options{
		Path:          b.TempDir() + "/appview.db",
		IndexAll:      true,
		RecordCacheMB: cacheMB,
		Feeds: []feeds.Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 100,
			Targets: []feeds.Target{{Collection: postNSID, Cap: benchCap}}}},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })

	viewers := make([]syntax.DID, benchViewers)
	for i := range viewers {
		viewers[i] = syntax.DID(workload.AccountDID(i))
	}
	author := func(a int) syntax.DID { return syntax.DID(workload.AccountDID(benchViewers + a)) }
	t := int64(1_767_225_600_000_000)
	var batch []feeds.Change
	flush := func() {
		if _, err := s.ApplyBatch(ctx, &feeds.Batch{Changes: batch, Cursor: feeds.StreamCursor{TimeUS: t}}); err != nil {
			b.Fatal(err)
		}
		batch = batch[:0]
	}
	for v, did := range viewers {
		for k := range benchFollows {
			t++
			subject := author((v + k*(benchAuthors/benchFollows)) % benchAuthors)
			batch = append(batch, feeds.Change{
				DID: did, Collection: followNSID, RKey: syntax.RecordKey(tid(t)), Op: feeds.OpCreate,
				Rev: tid(t), CID: "bafyreibaowdggfizbfrk2ypwue7e2mw5a3mjn665rxjs6gx7pd7oxfha3y", Subject: subject, TimeUS: t,
				Record: json.RawMessage(fmt.Sprintf(`{"$type":"app.bsky.graph.follow","createdAt":"2026-01-01T00:00:00.000Z","subject":%q}`, subject)),
			})
		}
		if len(batch) >= 1000 {
			flush()
		}
	}
	for p := range benchPosts {
		for a := range benchAuthors {
			t += 1000
			created := time.UnixMicro(t).UTC().Format("2006-01-02T15:04:05.000Z")
			batch = append(batch, feeds.Change{
				DID: author(a), Collection: postNSID, RKey: syntax.RecordKey(tid(t)), Op: feeds.OpCreate,
				Rev: tid(t), CID: "bafyreigwuiotmkaytriom4alrxkamtlzsf35xljotttx6oy3hd63xuxyyq", TimeUS: t, CreatedAtUS: t,
				Record: json.RawMessage(fmt.Sprintf(`{"$type":"app.bsky.feed.post","createdAt":%q,"langs":["en"],"text":"post %d of author %d: took the long way home tonight and the lake was glowing, some days the city is kind to you"}`, created, p, a)),
			})
		}
		flush()
	}
	flush()
	// Every feed is at cap.
	page, err := s.ReadFeed(ctx, feeds.PageQuery{Feed: "following", Viewer: viewers[0], Collection: postNSID, Limit: benchCap + 1})
	if err != nil || len(page.Items) != benchCap {
		b.Fatalf("viewer 0 has %d items (err %v), want %d", len(page.Items), err, benchCap)
	}
	return s, viewers
}

// BenchmarkReadFeed reads one page of 50 of a random viewer's feed
// through feeds.Store.ReadFeed: the first page, and the second through
// its cursor; without the record cache and with one that holds every
// record (warmed by one read of each page).
func BenchmarkReadFeed(b *testing.B) {
	for _, cache := range []struct {
		name string
		mb   int
	}{{"nocache", 0}, {"cached", 32}} {
		b.Run(cache.name, func(b *testing.B) { benchReadFeed(b, cache.mb) })
	}
}

func benchReadFeed(b *testing.B, cacheMB int) {
	s, viewers := capStore(b, cacheMB)
	ctx := context.Background()
	second := make([]*feeds.PageKey, len(viewers))
	for i, v := range viewers {
		p, err := s.ReadFeed(ctx, feeds.PageQuery{Feed: "following", Viewer: v, Collection: postNSID, Limit: benchLimit})
		if err != nil {
			b.Fatal(err)
		}
		second[i] = p.Next
		if _, err := s.ReadFeed(ctx, feeds.PageQuery{Feed: "following", Viewer: v, Collection: postNSID, Limit: benchLimit, Before: p.Next}); err != nil {
			b.Fatal(err)
		}
	}
	for _, name := range []string{"first", "second"} {
		b.Run(name, func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			b.ReportAllocs()
			start := time.Now()
			for b.Loop() {
				i := r.IntN(len(viewers))
				q := feeds.PageQuery{Feed: "following", Viewer: viewers[i], Collection: postNSID, Limit: benchLimit}
				if name == "second" {
					q.Before = second[i]
				}
				p, err := s.ReadFeed(ctx, q)
				if err != nil || len(p.Items) != benchLimit {
					b.Fatalf("page of %d items, err %v", len(p.Items), err)
				}
			}
			b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N), "ns/page")
		})
	}
}

// BenchmarkGetFeed serves the first page of 50 of a random viewer's feed
// through the whole XRPC handler (routing, parameters, the store, the
// page cursor, JSON), without the network.
func BenchmarkGetFeed(b *testing.B) {
	s, viewers := capStore(b, 32)
	srv := xrpc.NewServer(xrpc.Config{
		Namespace: "com.example.appview",
		Feeds:     []xrpc.FeedSpec{{Name: "following", Collections: []syntax.NSID{postNSID}}},
		Reader:    s,
		Version:   "bench",
	})
	h := srv.Handler()
	urls := make([]string, len(viewers))
	for i, v := range viewers {
		urls[i] = "/xrpc/com.example.appview.getFeed?" + url.Values{"feed": {"following"}, "actor": {string(v)}, "limit": {fmt.Sprint(benchLimit)}}.Encode()
	}
	r := rand.New(rand.NewPCG(1, 2))
	var bytes int64
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, urls[r.IntN(len(urls))], nil))
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		bytes += int64(rec.Body.Len())
	}
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N), "ns/page")
	b.ReportMetric(float64(bytes)/float64(b.N), "bytes/page")
}
