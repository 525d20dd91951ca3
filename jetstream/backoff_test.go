package jetstream

import (
	"context"
	"testing"
	"time"
)

func TestBackoffDelay(t *testing.T) {
	const lo, hi = 250 * time.Millisecond, 30 * time.Second
	for attempt, want := range []time.Duration{250, 500, 1000, 2000, 4000, 8000, 16000, 30000, 30000} {
		want *= time.Millisecond
		if got := backoffDelay(attempt, lo, hi, func() float64 { return 0 }); got != want/2 {
			t.Errorf("attempt %d, no jitter: %v, want %v", attempt, got, want/2)
		}
		if got := backoffDelay(attempt, lo, hi, func() float64 { return 0.999999 }); got > want || got < want*99/100 {
			t.Errorf("attempt %d, full jitter: %v, want about %v", attempt, got, want)
		}
	}
	if got := backoffDelay(1000, lo, hi, func() float64 { return 0 }); got != hi/2 {
		t.Errorf("huge attempt: %v", got)
	}
}

func TestSleepCtxWakesOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := sleepCtx(ctx, time.Hour); err == nil {
		t.Fatal("sleep ignored a cancelled context")
	}
	if err := sleepCtx(context.Background(), time.Microsecond); err != nil {
		t.Fatal(err)
	}
}
