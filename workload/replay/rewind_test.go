package replay

import (
	"bytes"
	"fmt"
	"strconv"
	"testing"

	"github.com/atfeeds/appview/workload"
)

// The rewind log keeps the newest frames within its bytes and its
// entries, reads back frames that straddle the ring's end, and reports a
// cursor older than what it still keeps as a gap.
func TestRewindLogKeepsTheNewestFrames(t *testing.T) {
	for _, tc := range []struct {
		name          string
		size, entries int
		kept          int
	}{
		{"bounded by bytes", 1000, 64, 9}, // 110-byte frames: 9 fit in 1000 bytes
		{"bounded by entries", 1 << 20, 16, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := newRewindLog(t.TempDir(), int64(tc.size), tc.entries)
			if err != nil {
				t.Fatal(err)
			}
			defer l.close()
			var frames []workload.Frame
			for i := range 100 {
				f := workload.Frame{Data: []byte(fmt.Sprintf("%-110d", i)), TimeUS: 1e15 + int64(i)*1000, Kind: workload.KindPostCreate}
				frames = append(frames, f)
				if err := l.add(f); err != nil {
					t.Fatal(err)
				}
				if i%7 == 0 { // some frames in the file, some still pending
					if err := l.flush(); err != nil {
						t.Fatal(err)
					}
				}
			}
			oldest := 100 - tc.kept
			got, gap := l.since(frames[oldest].TimeUS)
			if gap || len(got) != tc.kept {
				t.Fatalf("since the oldest kept frame: %d frames, gap %v; want %d, no gap", len(got), gap, tc.kept)
			}
			for i, e := range got {
				f, err := l.read(e)
				if err != nil {
					t.Fatal(err)
				}
				if want := frames[oldest+i]; !bytes.Equal(f.Data, want.Data) || f.TimeUS != want.TimeUS || f.Kind != want.Kind {
					t.Fatalf("kept frame %d reads back %q at %d, want %q at %d", i, f.Data, f.TimeUS, want.Data, want.TimeUS)
				}
			}
			if got, gap := l.since(frames[oldest-1].TimeUS); !gap || len(got) != tc.kept {
				t.Errorf("since the newest dropped frame: %d frames, gap %v; want the %d kept and a gap", len(got), gap, tc.kept)
			}
			if got, gap := l.since(frames[99].TimeUS + 1); gap || len(got) != 0 {
				t.Errorf("since after the newest frame: %d frames, gap %v; want none", len(got), gap)
			}
		})
	}
}

// A client that reconnects with a cursor gets every frame at or after it
// again, those the server had sent before included, then the rest of the
// source: nothing in flight when it left is lost.
func TestReconnectReplaysFromTheCursor(t *testing.T) {
	w := smallWorkload(t)
	log, frames := logOf(t, w.Stream(), 300)
	srv := startServer(t, Log(bytes.NewReader(log)))
	conn := dialB(t, srv.URL(), false)
	for range 100 {
		read(t, conn)
	}
	conn.Close()

	cursor := frames[60].TimeUS
	conn = dial(t, srv.URL()+"?cursor="+strconv.FormatInt(cursor, 10), false)
	for i, f := range frames {
		if f.TimeUS < cursor {
			continue
		}
		if got := read(t, conn); !bytes.Equal(got, f.Data) {
			t.Fatalf("frame %d after the reconnect: got %q, want %q", i, got, f.Data)
		}
	}
	if srv.Replayed() < 40 || srv.Gaps() != 0 {
		t.Errorf("replayed %d frames with %d gaps; want at least the 40 read after the cursor, no gap", srv.Replayed(), srv.Gaps())
	}
}
