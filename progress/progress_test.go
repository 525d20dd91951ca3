package progress

import (
	"bytes"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

func TestBarRedrawsInPlaceAtMostEveryInterval(t *testing.T) {
	var buf bytes.Buffer
	c := &clock{t: time.Unix(1_000, 0)}
	r := New(&buf, Options{Task: "rebuild", Terminal: true, Now: c.now})

	r.Update(0, 10)
	c.advance(10 * time.Millisecond)
	r.Update(1, 10) // too soon after the first draw: skipped
	c.advance(990 * time.Millisecond)
	r.Update(5, 10) // 5 done in 1s: 5/s, 1s left
	c.advance(time.Second)
	r.Update(10, 10)
	r.Finish("done")

	frames := strings.Split(buf.String(), "\r")[1:]
	want := []string{
		"rebuild [                              ] 0/10   0%  0.0/s  ETA --\x1b[K",
		"rebuild [==============>               ] 5/10  50%  5.0/s  ETA 1s\x1b[K",
		"rebuild [==============================] 10/10 100%  5.0/s  ETA 0s\x1b[K",
		"rebuild [==============================] 10/10 100%  5.0/s  ETA 0s\x1b[K  done\n",
	}
	if len(frames) != len(want) {
		t.Fatalf("%d frames, want %d:\n%q", len(frames), len(want), buf.String())
	}
	for i := range want {
		if frames[i] != want[i] {
			t.Errorf("frame %d = %q, want %q", i, frames[i], want[i])
		}
	}
}

func TestLogLinesEveryIntervalWithRateFromTheResumePoint(t *testing.T) {
	var buf bytes.Buffer
	c := &clock{t: time.Unix(1_000, 0)}
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	r := New(&buf, Options{Task: "backfill", Every: 5 * time.Second, Logger: log, Now: c.now})

	r.Update(40, 100) // resumed at 40: the rate counts from here
	for range 6 {
		c.advance(time.Second)
		r.mu.Lock()
		done := r.done + 2
		r.mu.Unlock()
		r.Update(done, 100)
	}
	r.Finish("interrupted")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{
		`level=INFO msg=progress task=backfill state=running done=40 total=100 rate_per_second=0 elapsed=0s`,
		`level=INFO msg=progress task=backfill state=running done=50 total=100 rate_per_second=2 elapsed=5s eta=25s`,
		`level=INFO msg=progress task=backfill state=interrupted done=52 total=100 rate_per_second=2 elapsed=6s`,
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("log:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if strings.Contains(buf.String(), "\r") {
		t.Error("log mode wrote a carriage return")
	}
}

func TestFinishWithoutUpdatesShowsNothing(t *testing.T) {
	for _, term := range []bool{true, false} {
		var buf bytes.Buffer
		New(&buf, Options{Task: "x", Terminal: term}).Finish("done")
		if buf.Len() != 0 {
			t.Errorf("terminal=%v: wrote %q", term, buf.String())
		}
	}
}

func TestIsTerminal(t *testing.T) {
	if IsTerminal(&bytes.Buffer{}) {
		t.Error("a buffer is not a terminal")
	}
	f, err := os.Create(t.TempDir() + "/out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if IsTerminal(f) {
		t.Error("a regular file is not a terminal")
	}
	if null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0); err == nil {
		defer null.Close()
		// /dev/null is a character device: IsTerminal answers by the mode,
		// the cheap check that needs no ioctl.
		if !IsTerminal(null) {
			t.Error("/dev/null is a character device")
		}
	}
}
