package jetstream

import (
	"log/slog"
	"sync"
	"time"
)

// dropLogInterval is how often each drop reason may be logged. A broken
// upstream can send thousands of bad frames a second; the metric counts
// them all, the log only needs to say that it is happening and why.
const dropLogInterval = 10 * time.Second

// dropLogger logs dropped frames, at most one line per reason per interval,
// with the number of drops it left out since the last line.
type dropLogger struct {
	logger   *slog.Logger
	interval time.Duration
	now      func() time.Time

	mu         sync.Mutex
	last       map[string]time.Time
	suppressed map[string]int
}

func newDropLogger(logger *slog.Logger, interval time.Duration, now func() time.Time) *dropLogger {
	return &dropLogger{
		logger:     logger,
		interval:   interval,
		now:        now,
		last:       make(map[string]time.Time),
		suppressed: make(map[string]int),
	}
}

func (l *dropLogger) log(host string, ev *Event, derr *DropError) {
	l.mu.Lock()
	now := l.now()
	if last, ok := l.last[derr.Reason]; ok && now.Sub(last) < l.interval {
		l.suppressed[derr.Reason]++
		l.mu.Unlock()
		return
	}
	n := l.suppressed[derr.Reason]
	l.last[derr.Reason] = now
	l.suppressed[derr.Reason] = 0
	l.mu.Unlock()

	l.logger.Warn("dropped frame",
		"reason", derr.Reason,
		"err", derr.Err,
		"host", host,
		"did", string(ev.DID),
		"time_us", ev.TimeUS,
		"suppressed", n,
	)
}
