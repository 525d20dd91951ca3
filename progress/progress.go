// Package progress tells an operator how far a long command got: a
// one-line bar redrawn in place when a person watches a terminal, and a
// log line every few seconds otherwise (a pipe, a file, the journal), where
// carriage returns would only make noise.
package progress

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
)

// Options configures a Reporter. Zero values take the defaults noted.
type Options struct {
	// Task names the work in the bar and in every log line.
	Task string
	// Terminal draws a bar on the writer; otherwise Logger gets a line
	// every Every (see IsTerminal).
	Terminal bool
	// Every is the interval between log lines (default 5s).
	Every time.Duration
	// Logger receives the log lines (default: a text logger on the writer).
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// redrawEvery bounds how often the bar is redrawn: fast updates would
// spend more time writing to the terminal than working.
const redrawEvery = 100 * time.Millisecond

// barWidth is the number of cells in the bar.
const barWidth = 30

// Reporter turns (done, total) updates into a bar or log lines. Its
// methods are safe for concurrent use.
type Reporter struct {
	w    io.Writer
	opts Options

	mu        sync.Mutex
	started   bool
	start     time.Time
	startDone int // done at the first update: a resumed run counts its rate from there
	done      int
	total     int
	last      time.Time // last draw or log line
}

// New returns a Reporter writing to w.
func New(w io.Writer, opts Options) *Reporter {
	if opts.Every <= 0 {
		opts.Every = 5 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(w, nil))
	}
	return &Reporter{w: w, opts: opts}
}

// IsTerminal reports whether w is a character device (a terminal), where
// a bar redrawn with carriage returns reads well.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// Update records that done of total units are finished. The first update
// is always shown; later ones at most every redraw interval (bar) or every
// Every (log), and on a bar the last one (done == total) always.
func (r *Reporter) Update(done, total int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.opts.Now()
	if !r.started {
		r.started, r.start, r.startDone = true, now, done
		r.done, r.total = done, total
		r.show(now)
		return
	}
	r.done, r.total = done, total
	every := r.opts.Every
	if r.opts.Terminal {
		every = redrawEvery
	}
	// A bar shows its last step at once; a log gets it from Finish.
	if now.Sub(r.last) >= every || (r.opts.Terminal && done >= total && total > 0) {
		r.show(now)
	}
}

// Finish shows the final state with its outcome ("done", "interrupted",
// …) and ends the bar's line. Without an update before it, there was no
// progress to show, and it shows nothing.
func (r *Reporter) Finish(outcome string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.started {
		return
	}
	now := r.opts.Now()
	if r.opts.Terminal {
		r.draw(now)
		fmt.Fprintf(r.w, "  %s\n", outcome)
		return
	}
	r.opts.Logger.Info("progress", r.attrs(now, outcome)...)
}

func (r *Reporter) show(now time.Time) {
	r.last = now
	if r.opts.Terminal {
		r.draw(now)
		return
	}
	r.opts.Logger.Info("progress", r.attrs(now, "running")...)
}

// draw rewrites the line: "task [=====>    ] 45/100  45%  12.3/s  ETA 4s".
func (r *Reporter) draw(now time.Time) {
	filled := 0
	pct := 0
	if r.total > 0 {
		filled = min(barWidth, r.done*barWidth/r.total)
		pct = min(100, r.done*100/r.total)
	}
	bar := strings.Repeat("=", filled)
	if filled < barWidth {
		if filled > 0 {
			bar = bar[:filled-1] + ">"
		}
		bar += strings.Repeat(" ", barWidth-filled)
	}
	rate, eta, known := r.pace(now)
	tail := "ETA --"
	if known {
		tail = "ETA " + eta.String()
	}
	// \r returns to the line's start; \x1b[K clears what a longer earlier
	// line left behind.
	fmt.Fprintf(r.w, "\r%s [%s] %d/%d %3d%%  %.1f/s  %s\x1b[K", r.opts.Task, bar, r.done, r.total, pct, rate, tail)
}

func (r *Reporter) attrs(now time.Time, state string) []any {
	rate, eta, known := r.pace(now)
	a := []any{"task", r.opts.Task, "state", state, "done", r.done, "total", r.total,
		"rate_per_second", float64(int(rate*10)) / 10, "elapsed", now.Sub(r.start).Round(time.Second)}
	if known && state == "running" {
		a = append(a, "eta", eta)
	}
	return a
}

// pace is the rate since the first update and the time left at that
// rate, rounded to the second; known is false until there is a rate.
func (r *Reporter) pace(now time.Time) (rate float64, eta time.Duration, known bool) {
	elapsed := now.Sub(r.start).Seconds()
	progressed := r.done - r.startDone
	if elapsed <= 0 || progressed <= 0 {
		return 0, 0, false
	}
	rate = float64(progressed) / elapsed
	left := max(0, r.total-r.done)
	eta = time.Duration(float64(left) / rate * float64(time.Second)).Round(time.Second)
	return rate, eta, true
}
