package feeds

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A write that waits for the write lock is timed by who waits: a
// request's (Urgent) apart from one no request waits on. Each wait here
// is at least as long as the open batch held the lock after the write
// asked for it.
func TestAWritesWaitForTheLockIsTimedByWhoWaits(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	s := mustOpenWith(t, Options{Path: t.TempDir() + "/appview.db", Feeds: defaultFeeds, Metrics: NewMetrics(reg)})
	now := time.Unix(1_700_000_000, 0)

	// hold opens a batch, starts a registration under ctx, waits for
	// asked, and holds the lock 20 ms more before it lets the write in.
	hold := func(ctx context.Context, viewer string, asked func()) {
		t.Helper()
		o, err := s.BeginBatch(context.Background(), true)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := s.RegisterViewer(ctx, did(viewer), "following", now)
			done <- err
		}()
		asked()
		time.Sleep(20 * time.Millisecond)
		o.Rollback()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	hold(Urgent(ctx), "urgent", func() {
		for !s.WriterWanted() {
			time.Sleep(time.Millisecond)
		}
	})
	if count, sum := writeWait(t, reg, "request"); count != 1 || sum < 0.020 {
		t.Errorf("request writes: %d timed, %.4f s waited; want 1, at least the 20 ms the batch held the lock after it asked", count, sum)
	}
	if count, _ := writeWait(t, reg, "background"); count != 0 {
		t.Errorf("a request's write was timed as a background one")
	}
	// A background write says nothing while it waits.
	hold(ctx, "background", func() {})
	if count, _ := writeWait(t, reg, "background"); count != 1 {
		t.Errorf("background writes timed: %d, want 1", count)
	}
	if count, _ := writeWait(t, reg, "request"); count != 1 {
		t.Errorf("a background write was timed as a request's")
	}
}

// writeWait reads the write-lock wait histogram of one writer label.
func writeWait(t *testing.T, reg *prometheus.Registry, writer string) (uint64, float64) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "appview_database_write_lock_wait_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "writer" && l.GetValue() == writer {
					h := m.GetHistogram()
					return h.GetSampleCount(), h.GetSampleSum()
				}
			}
		}
	}
	t.Fatalf("no write-lock wait series for writer %q", writer)
	return 0, 0
}
