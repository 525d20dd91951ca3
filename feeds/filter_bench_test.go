package feeds

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkFilteredPage reads the first page of 50 of one viewer's feed
// of 5,000 posts (50 followed authors × 100 posts, cap 5,000) under
// filters of falling selectivity, and reports the feed rows each page
// examined. Every post is in English; one in 2 is also in Portuguese, one
// in 100 in German, none in "xx"; createdAt spans 5,000 minutes and the
// range keeps 10% of them, from the middle of the feed.
//
//	go test ./feeds -run '^$' -bench FilteredPage -benchtime 200x
func BenchmarkFilteredPage(b *testing.B) {
	s := MustOpen(b, filterFeedsCap(5000, filterFields...))
	var batch []Change
	for a := range 50 {
		batch = append(batch, follow("alice", fmt.Sprint("a", a), fmt.Sprint("f", a), 1))
	}
	apply(b, s, batch...)
	batch = batch[:0]
	for i := range 5000 {
		langs := []string{"en"}
		if i%2 == 0 {
			langs = append(langs, "pt")
		}
		if i%100 == 0 {
			langs = append(langs, "de")
		}
		batch = append(batch, langPost(fmt.Sprint("a", i%50), fmt.Sprintf("p%05d", i), int64(10+i), langs...))
		if len(batch) == 1000 {
			apply(b, s, batch...)
			batch = batch[:0]
		}
	}
	cases := []struct {
		name    string
		filters []Filter
	}{
		{"unfiltered", nil},
		{"langs=en(all)", []Filter{langsFilter("en")}},
		{"langs=pt(1/2)", []Filter{langsFilter("pt")}},
		{"langs=de(1/100)", []Filter{langsFilter("de")}},
		{"langs=xx(none)", []Filter{langsFilter("xx")}},
		{"createdAt(10%,mid)", []Filter{createdFilter(minute(2250), minute(2749))}},
		{"createdAtMin(10%,top)", []Filter{createdFilter(minute(4510), math.MaxInt64)}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			q := PageQuery{Feed: "following", Viewer: did("alice"), Collection: postNSID, Limit: 50, Filters: tc.filters}
			var examined, items int
			start := time.Now()
			for b.Loop() {
				p, err := s.ReadFeed(context.Background(), q)
				if err != nil {
					b.Fatal(err)
				}
				examined += p.Examined
				items += len(p.Items)
			}
			b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N), "ns/page")
			b.ReportMetric(float64(examined)/float64(b.N), "rows/page")
			b.ReportMetric(float64(items)/float64(b.N), "items/page")
		})
	}
}

// BenchmarkApplyBatchFields measures what extracting two declared fields
// (langs, createdAt) adds to ingest: the stream of BenchmarkApplyBatch at
// batch size 1,000, posts carrying langs and createdAt, with and without
// the fields declared.
//
//	go test ./feeds -run '^$' -bench ApplyBatchFields -benchtime 20000x
func BenchmarkApplyBatchFields(b *testing.B) {
	for _, declared := range []bool{false, true} {
		b.Run(fmt.Sprintf("fields=%v", declared), func(b *testing.B) {
			var fields []Field
			if declared {
				fields = filterFields
			}
			s := MustOpen(b, filterFeedsCap(200, fields...))
			const accounts = 10_000
			seedGraph(b, s, accounts, 20)
			rng := rand.New(rand.NewPCG(1, 2))
			eps := streamBatches(b, s, 1000, func(ts int64) Change {
				c := langPost(fmt.Sprint("a", rng.IntN(accounts)), fmt.Sprint("p", ts), ts%5000, "en", "pt")
				c.TimeUS, c.Rev = ts, rev(ts)
				return c
			})
			b.ReportMetric(eps, "events/s")
		})
	}
}

// BenchmarkExtractFields is the CPU part of extraction for one typical
// post and the two fields langs and createdAt.
//
//	go test ./feeds -run '^$' -bench ExtractFields
func BenchmarkExtractFields(b *testing.B) {
	body := []byte(`{"$type":"app.bsky.feed.post","createdAt":"2026-01-01T00:00:00.000Z","langs":["en","pt"],"text":"took the long way home tonight and the lake was glowing, some days the city is kind to you","facets":[{"index":{"byteStart":0,"byteEnd":4},"features":[{"$type":"app.bsky.richtext.facet#tag","tag":"lake"}]}]}`)
	defs := []fieldDef{
		{id: 1, path: splitFieldPath("langs"), kind: FieldEquality},
		{id: 2, path: splitFieldPath("createdAt"), kind: FieldDatetime},
	}
	b.ReportAllocs()
	for b.Loop() {
		if vals := extractFields(body, defs); len(vals[0]) != 2 || len(vals[1]) != 1 {
			b.Fatalf("values %v", vals)
		}
	}
}
