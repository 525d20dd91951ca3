package jetstream

import (
	"github.com/atfeeds/appview/internal/syncbuf"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestDropLoggerRateLimitsPerReason(t *testing.T) {
	var buf syncbuf.Buffer
	now := time.Unix(0, 0)
	l := newDropLogger(slog.New(slog.NewTextHandler(&buf, nil)), 10*time.Second, func() time.Time { return now })
	ev := &Event{}
	l.log("h", ev, drop(ReasonBadJSON, nil))
	l.log("h", ev, drop(ReasonBadJSON, nil))
	l.log("h", ev, drop(ReasonBadDID, nil)) // another reason has its own budget
	now = now.Add(9 * time.Second)
	l.log("h", ev, drop(ReasonBadJSON, nil))
	now = now.Add(time.Second)
	l.log("h", ev, drop(ReasonBadJSON, nil))

	logs := buf.String()
	if n := strings.Count(logs, "reason=bad_json"); n != 2 {
		t.Errorf("bad_json logged %d times, want 2:\n%s", n, logs)
	}
	if n := strings.Count(logs, "reason=bad_did"); n != 1 {
		t.Errorf("bad_did logged %d times, want 1:\n%s", n, logs)
	}
	if !strings.Contains(logs, "suppressed=2") {
		t.Errorf("second bad_json line should report 2 suppressed:\n%s", logs)
	}
}
