package tokenbucket

import (
	"testing"
	"time"
)

func TestBucket(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := Shape{Burst: 2, PerSecond: 0.5}
	b := Full(s, now)
	for range 2 {
		if !b.Has() {
			t.Fatal("a full bucket of 2 ran dry")
		}
		b.Take()
	}
	if b.Has() || b.Wait(s) != 2*time.Second {
		t.Fatalf("empty: has %v, wait %v; want none, 2s (half a token a second)", b.Has(), b.Wait(s))
	}
	b.Refill(s, now.Add(-time.Hour)) // a clock that went back
	if b.Has() || b.Wait(s) != 2*time.Second {
		t.Fatalf("after the clock went back: has %v, wait %v", b.Has(), b.Wait(s))
	}
	b.Refill(s, now.Add(time.Second))
	if b.Has() || b.Wait(s) != time.Second {
		t.Fatalf("a second later: has %v, wait %v; want none, 1s", b.Has(), b.Wait(s))
	}
	b.Refill(s, now.Add(time.Hour))
	if !b.IsFull(s) || b.Wait(s) != 0 {
		t.Fatalf("an hour later: full %v, wait %v; want full, 0", b.IsFull(s), b.Wait(s))
	}
}
