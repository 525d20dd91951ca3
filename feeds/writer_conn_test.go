package feeds

import (
	"context"
	"database/sql/driver"
	"slices"
	"testing"
)

// database/sql replaces a writer connection it finds broken (one whose
// statement was interrupted by its context, for one): the replacement has
// the fan-out's TEMP table too, and batches go on fanning out.
func TestAReplacedWriterConnectionStillFansOut(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	ctx := context.Background()
	apply(t, s, follow("alice", "carol", "f1", 1)) // the writer's statements are prepared
	conn, err := s.writer.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	conn.Raw(func(any) error { return driver.ErrBadConn }) // discarded
	conn.Close()
	apply(t, s, post("carol", "p1", 2))
	if got := feedRKeys(t, s, "following", "alice", postNSID); !slices.Equal(got, []string{"p1"}) {
		t.Errorf("alice's feed = %v, want [p1]", got)
	}
}
