package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/atfeeds/appview/workload"
)

// generated describes the frame logs written before the daemon starts.
type generated struct {
	seedPath, mainPath string
	seedFrames         int
	seedLastUS         int64
	// ends[k] is the index one past the last frame of tenth k, and
	// boundaries[k] the largest time_us among frames before it: once the
	// committed cursor reaches it, the tenth is applied.
	ends       [10]int
	boundaries [10]int64
	// marks[j] is the largest time_us among the first (j+1)*markEvery
	// frames of the main log: committed turns a cursor into how many
	// frames it covers.
	marks []int64
	kinds map[workload.Kind]int
	bytes int64
}

// generate writes the seeding stream (the follow graph, then -prefill
// stream frames) and the main stream (the timed frames plus a tail) to
// frame logs. The main stream is kept, positioned
// after the logged frames, for the read phase's live ingest.
func (b *bench) generate() error {
	start := time.Now()
	g := &b.gen
	g.seedPath = filepath.Join(b.dir, "seed.frames")
	g.mainPath = filepath.Join(b.dir, "main.frames")
	g.kinds = map[workload.Kind]int{}

	b.stream = b.w.Stream()
	err := writeLog(g.seedPath, func(lw *workload.LogWriter) error {
		graph := b.w.Graph()
		for f, ok := graph.Next(); ok; f, ok = graph.Next() {
			if err := lw.Write(f); err != nil {
				return err
			}
			g.seedLastUS = max(g.seedLastUS, f.TimeUS)
		}
		g.seedFrames = graph.Count()
		// -prefill: the stream's first frames, untimed, so the timed
		// stream starts with feeds already at their caps.
		for range b.o.prefill {
			f := b.stream.Next()
			if err := lw.Write(f); err != nil {
				return err
			}
			g.seedLastUS = max(g.seedLastUS, f.TimeUS)
		}
		return nil
	})
	if err != nil {
		return err
	}

	n := b.o.events
	for k := range g.ends {
		g.ends[k] = (k + 1) * n / 10
	}
	err = writeLog(g.mainPath, func(lw *workload.LogWriter) error {
		var maxUS, maxAllUS int64
		k := 0
		for i := range n + b.tail() {
			f := b.stream.Next()
			if err := lw.Write(f); err != nil {
				return err
			}
			maxAllUS = max(maxAllUS, f.TimeUS)
			if (i+1)%markEvery == 0 {
				g.marks = append(g.marks, maxAllUS)
			}
			if i >= n {
				continue
			}
			maxUS = max(maxUS, f.TimeUS)
			g.kinds[f.Kind]++
			g.bytes += int64(len(f.Data))
			if i+1 == g.ends[k] {
				g.boundaries[k] = maxUS
				k++
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(b.out, "generated %d seed follows and %d+%d stream frames (mean %d bytes) in %.1fs\n",
		g.seedFrames, n, b.tail(), g.bytes/int64(n), time.Since(start).Seconds())
	fmt.Fprint(b.out, "  stream mix:")
	for _, k := range workload.Kinds() {
		if c := g.kinds[k]; c > 0 {
			fmt.Fprintf(b.out, " %s %.2f%%", k, 100*float64(c)/float64(n))
		}
	}
	fmt.Fprintln(b.out)
	return nil
}

// markEvery is the resolution of generated.committed, in frames.
const markEvery = 100

// committed returns how many frames of the main log a committed cursor
// covers, to within markEvery. A batch commits many frames at once, so
// the cursor crosses a tenth's boundary up to a batch past it; counting
// what it covers, not the nominal tenth, keeps each tenth's rate exact.
func (g *generated) committed(cursorUS int64) int {
	return markEvery * sort.Search(len(g.marks), func(j int) bool { return g.marks[j] > cursorUS })
}

func writeLog(path string, fill func(*workload.LogWriter) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create frame log: %w", err)
	}
	lw := workload.NewLogWriter(f)
	if err := fill(lw); err != nil {
		f.Close()
		return err
	}
	if err := lw.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
