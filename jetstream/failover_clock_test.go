package jetstream

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// A host whose clock runs fast stamps its events ahead of the same events
// on the next host. Failing over from its position rewound only
// Config.Rewind, the client asked the next host for events past ones it
// never had, and they were skipped for good. It now rewinds the decoder's
// clock skew allowance, the furthest ahead a stamp it accepted can be.
func TestFailoverFromAFastHostReplaysItsSkew(t *testing.T) {
	const ahead = 4 * time.Minute // within the test decoder's 5 min allowance
	trueLast := testNow.Add(-time.Minute).UnixMicro()
	fastPos := trueLast + ahead.Microseconds()

	fast := newFakeServer(t, func(int, *websocket.Conn) {})
	fast.refuseWith(http.StatusServiceUnavailable, "gone")
	// The next host's log, on its correct clock: the event the fast host
	// had delivered at fastPos, and one after it that the client never saw.
	missed := trueLast + 30_000_000
	l := newReplayLog(trueLast, 1)
	l.times = append(l.times, missed)
	l.frames = append(l.frames, newReplayLog(missed, 1).frames[0])
	next := l.serve(t, func(int, int64) bool { return false }, func(int, int64) bool { return false })

	h := startClient(t, Config{URLs: []string{fast.url, next.url}, Rewind: 2 * time.Second},
		fixed(Position{TimeUS: fastPos, Host: fast.url}), 10)
	waitFor(t, "a dial to the next host", func() bool { return len(next.dials()) > 0 })
	cursor, _ := strconv.ParseInt(next.dials()[0].Get("cursor"), 10, 64)
	if want := fastPos - (5 * time.Minute).Microseconds(); cursor != want {
		t.Errorf("cursor sent to the next host = %d, want %d (the position less the skew allowance)", cursor, want)
	}
	for ev := h.next(t); ev.TimeUS != missed; ev = h.next(t) {
	}
}

// A failover to a host the position did not come from is the only case
// that rewinds the skew: the same host, and a position of no known host
// (an operator's reset to a time), rewind Config.Rewind.
func TestOnlyAnotherHostsPositionRewindsTheSkew(t *testing.T) {
	c := NewClient(Config{URLs: []string{"ws://a/subscribe"}, Rewind: 2 * time.Second}, testDecoder(), nil, nil)
	for _, tc := range []struct {
		host string
		want time.Duration
	}{
		{"ws://a/subscribe", 2 * time.Second},
		{"", 2 * time.Second},
		{"ws://b/subscribe", 5 * time.Minute},
	} {
		if _, got := c.resumeFrom("ws://a/subscribe", Position{TimeUS: 1, Host: tc.host}); got != tc.want {
			t.Errorf("position from %q: rewind %v, want %v", tc.host, got, tc.want)
		}
	}
}
