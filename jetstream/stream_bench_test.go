package jetstream_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/jetstream"
	"github.com/atfeeds/appview/workload"
)

// BenchmarkDecodeStream decodes the benchmark workload's stream (the
// issue 7 mix: posts, deletes, follows, duplicates, malformed frames) the
// way the read loop does, frame after frame, and reports events/s: the
// ceiling decoding puts on ingest.
//
//	go test ./jetstream -run '^$' -bench DecodeStream -benchmem
func BenchmarkDecodeStream(b *testing.B) {
	cfg := workload.DefaultConfig()
	cfg.Accounts, cfg.Viewers, cfg.Follows = 10_000, 1_000, 50
	w, err := workload.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	s := w.Stream()
	const n = 20_000
	frames := make([][]byte, n)
	var size int64
	for i := range frames {
		frames[i] = bytes.Clone(s.Next().Data)
		size += int64(len(frames[i]))
	}
	dec := jetstream.NewDecoder(jetstream.DecoderConfig{FollowCollections: []syntax.NSID{workload.FollowCollection}})
	b.SetBytes(size / n)
	b.ReportAllocs()
	i := 0
	start := time.Now()
	for b.Loop() {
		dec.Decode(frames[i%n]) // malformed frames are dropped, as in the read loop
		i++
	}
	b.ReportMetric(float64(i)/time.Since(start).Seconds(), "events/s")
}
