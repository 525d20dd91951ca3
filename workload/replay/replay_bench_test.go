package replay

import (
	"bytes"
	"testing"
	"time"

	"github.com/atfeeds/appview/workload"
)

// BenchmarkReplay streams workload frames from a frame log through the
// fake server to a gorilla client on loopback, with and without
// permessage-deflate: the websocket part of ingest, both ends in this
// process, so the compressed figure carries deflate (server) and inflate
// (client) alike.
//
//	go test ./workload/replay -run '^$' -bench Replay -benchmem
func BenchmarkReplay(b *testing.B) {
	cfg := workload.DefaultConfig()
	cfg.Accounts, cfg.Viewers, cfg.Follows = 10_000, 1_000, 50
	w, err := workload.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	var log bytes.Buffer
	lw := workload.NewLogWriter(&log)
	s := w.Stream()
	const n = 50_000
	var size int64
	for range n {
		f := s.Next()
		size += int64(len(f.Data))
		if err := lw.Write(f); err != nil {
			b.Fatal(err)
		}
	}
	if err := lw.Flush(); err != nil {
		b.Fatal(err)
	}
	for _, compress := range []bool{false, true} {
		name := "plain"
		if compress {
			name = "deflate"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			var frames int
			var took time.Duration
			for b.Loop() {
				srv, err := NewServer(Log(bytes.NewReader(log.Bytes())), nil)
				if err != nil {
					b.Fatal(err)
				}
				conn := dialB(b, srv.URL(), compress)
				start := time.Now()
				for range n {
					if _, _, err := conn.ReadMessage(); err != nil {
						b.Fatal(err)
					}
				}
				took += time.Since(start)
				frames += n
				conn.Close()
				srv.Close()
			}
			b.ReportMetric(float64(frames)/took.Seconds(), "events/s")
			b.ReportMetric(float64(took.Nanoseconds())/float64(frames), "ns/event")
			b.ReportMetric(float64(size)/n, "bytes/event")
			b.ReportMetric(0, "ns/op") // one op is a whole log; ns/event is the unit
		})
	}
}
