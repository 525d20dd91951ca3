package testclock

import (
	"testing"
	"time"
)

func TestClockMovesOnlyWhenAdvanced(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := New(start)
	if !c.Now().Equal(start) {
		t.Fatalf("Now = %v, want %v", c.Now(), start)
	}
	c.Advance(90 * time.Second)
	if want := start.Add(90 * time.Second); !c.Now().Equal(want) {
		t.Fatalf("after Advance, Now = %v, want %v", c.Now(), want)
	}
}
