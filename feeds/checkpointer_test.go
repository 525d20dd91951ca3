package feeds

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// The writer never checkpoints; the background checkpointer copies the WAL
// back once it passes its size, while batches keep committing.
func TestBackgroundCheckpointerFoldsTheWAL(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	s := mustOpenWith(t, Options{Path: path, Feeds: defaultFeeds, IndexAll: true, CheckpointBytes: 64 << 10})
	if got := querySQL[int](t, s, `PRAGMA wal_autocheckpoint`); got != 0 {
		t.Fatalf("writer wal_autocheckpoint = %d, want 0 (the checkpointer's job)", got)
	}
	apply(t, s, follow("v", "alice", "f", 1))
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; s.checkpointer.done.Load() == 0; i++ {
		if time.Now().After(deadline) {
			fi, _ := os.Stat(path + "-wal")
			t.Fatalf("no background checkpoint after %d batches (WAL %d bytes)", i, fi.Size())
		}
		apply(t, s, post("alice", fmt.Sprintf("p%d", i), int64(10+i)))
		time.Sleep(20 * time.Millisecond)
	}
	// Everything committed is still there, and the file reopens whole.
	n := len(feedRKeys(t, s, "following", "v", postNSID))
	if n == 0 {
		t.Fatal("feed empty")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := mustOpenWith(t, Options{Path: path, Feeds: defaultFeeds, IndexAll: true})
	if got := len(feedRKeys(t, s2, "following", "v", postNSID)); got != n {
		t.Fatalf("after reopen the feed holds %d items, want %d", got, n)
	}
}
