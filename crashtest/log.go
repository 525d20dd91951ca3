package crashtest

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/atfeeds/appview/jetstream/jetstreamtest"
	"github.com/atfeeds/appview/workload"
)

// Log is a generated Jetstream log: the seed follow graph, the main stream
// and a final sentinel post, with time_us never decreasing along it.
type Log struct {
	Workload *workload.Workload
	Frames   []workload.Frame // Data owned by the log
	// SeedFrames is how many frames of Frames are the seed graph.
	SeedFrames int
	// EndUS is the time_us of the sentinel, the last frame: the daemon has
	// consumed the log once its stored cursor reaches it.
	EndUS int64
}

// NewLog generates the seed graph of cfg and main frames of its stream.
//
// A duplicate from the generator repeats an earlier frame byte for byte,
// time_us included, which puts an older time in the middle of the log;
// jetstreamtest finds a resume position by binary search on time_us, which
// needs a log that never goes back in time. Real Jetstream stamps time_us
// when it receives an event, so a commit the relay sends twice comes back
// with a later time: that is what a duplicate here carries (the time of the
// frame before it), with the commit and its rev unchanged.
func NewLog(cfg workload.Config, main int) (*Log, error) {
	w, err := workload.New(cfg)
	if err != nil {
		return nil, err
	}
	l := &Log{Workload: w}
	g := w.Graph()
	for f, ok := g.Next(); ok; f, ok = g.Next() {
		l.add(f)
	}
	l.SeedFrames = len(l.Frames)
	// The generator packs the seed graph a microsecond or so apart, a
	// million events a second: a reconnect's rewind (100 ms, 5 s) would
	// then replay the whole graph. Spread it a millisecond apart like the
	// main stream, ending a second before it. Only time_us changes (the
	// time Jetstream saw the event); revs and rkeys keep their times.
	for i := range l.Frames {
		t := cfg.StartUS - 1_000_000 - int64(l.SeedFrames-i)*1000
		if err := l.retime(i, t); err != nil {
			return nil, err
		}
	}
	s := w.Stream()
	for range main {
		f := s.Next()
		l.add(f)
		if f.Kind == workload.KindDuplicate {
			if err := l.retime(len(l.Frames)-1, l.Frames[len(l.Frames)-2].TimeUS); err != nil {
				return nil, err
			}
		}
	}
	// The sentinel: a post by account 0, a millisecond after everything.
	l.EndUS = l.Frames[len(l.Frames)-1].TimeUS + 1000
	l.Frames = append(l.Frames, workload.Frame{
		Data:   jetstreamtest.Post(workload.AccountDID(0), jetstreamtest.Rev(l.EndUS), l.EndUS, "sentinel"),
		TimeUS: l.EndUS,
		Kind:   workload.KindPostCreate,
	})
	for i := 1; i < len(l.Frames); i++ {
		if l.Frames[i].TimeUS < l.Frames[i-1].TimeUS {
			return nil, fmt.Errorf("frame %d goes back in time", i)
		}
	}
	return l, nil
}

// LastTimeUS returns the time_us of the last well-formed frame before
// index n: the stored cursor a daemon reaches once it has applied them.
func (l *Log) LastTimeUS(n int) int64 {
	for i := min(n, len(l.Frames)) - 1; i >= 0; i-- {
		if l.Frames[i].Kind != workload.KindMalformed {
			return l.Frames[i].TimeUS
		}
	}
	return 0
}

// retime sets frame i's time_us, in its JSON too.
func (l *Log) retime(i int, t int64) error {
	f := &l.Frames[i]
	old := []byte(`"time_us":` + strconv.FormatInt(f.TimeUS, 10) + `,`)
	if !bytes.Contains(f.Data, old) {
		return fmt.Errorf("frame %d without %s: %q", i, old, f.Data)
	}
	f.Data = bytes.Replace(f.Data, old, []byte(`"time_us":`+strconv.FormatInt(t, 10)+`,`), 1)
	f.TimeUS = t
	return nil
}

func (l *Log) add(f workload.Frame) {
	f.Data = bytes.Clone(f.Data)
	l.Frames = append(l.Frames, f)
}

// Counts returns how many frames of each kind the log holds.
func (l *Log) Counts() map[workload.Kind]int {
	out := map[workload.Kind]int{}
	for _, f := range l.Frames {
		out[f.Kind]++
	}
	return out
}
