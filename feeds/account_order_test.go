package feeds

import (
	"context"
	"slices"
	"testing"
	"time"
)

// An account's status changes are ordered by the relay's time, which
// every Jetstream host carries alike, not by time_us, which each host
// stamps with its own clock. A deactivation delivered by a host whose
// clock runs four minutes fast (inside the decoder's skew allowance),
// then a reactivation a minute later delivered by a correct host after a
// failover: the reactivation was taken for older and ignored, and the
// account's posts stayed hidden for good (found by a review). The same
// for two changes a second apart across hosts whose clocks differ by two.
func TestAReactivationAfterAFailoverToASlowerClockIsApplied(t *testing.T) {
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixMicro()
	cases := []struct {
		name             string
		skew, reactivate time.Duration // host A's clock lead; when the reactivation follows
	}{
		{"fast host inside the skew", 4 * time.Minute, time.Minute},
		{"hosts two seconds apart", 2 * time.Second, time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := openViewerMode(t)
			ctx := context.Background()
			register(t, s, "v1", "following")
			apply(t, s, follow("v1", "carol", "f1", 1), post("carol", "p1", 2))
			deactivate := AccountStatus{DID: did("carol"), Status: "deactivated",
				TimeUS: base + tc.skew.Microseconds(), RelayTimeUS: base}
			at := base + tc.reactivate.Microseconds()
			reactivate := AccountStatus{DID: did("carol"), Active: true, TimeUS: at, RelayTimeUS: at}
			applyAccounts := func(events ...AccountStatus) {
				t.Helper()
				for _, a := range events {
					if _, err := s.ApplyBatch(ctx, &Batch{Accounts: []AccountStatus{a}, Cursor: StreamCursor{TimeUS: a.TimeUS}}); err != nil {
						t.Fatal(err)
					}
				}
			}
			want := func(when string, rkeys ...string) {
				t.Helper()
				if got := feedRKeys(t, s, "following", "v1", postNSID); !slices.Equal(got, rkeys) {
					t.Errorf("%s: v1's feed = %v, want %v", when, got, rkeys)
				}
			}
			applyAccounts(deactivate)
			want("deactivated")
			applyAccounts(reactivate)
			want("reactivated", "p1")
			// The reconnect rewind replays both, from either host: nothing
			// changes, and the old deactivation does not hide carol again.
			applyAccounts(deactivate, reactivate, deactivate)
			want("after the replays", "p1")
		})
	}
}

// A relay stamps its time to the millisecond: two status changes in one
// are ordered by its sequence number, and their replays change nothing.
// A huge sequence number, from a hostile frame, decides only within its
// own millisecond: any later change still applies.
func TestAccountEventsOfOneMillisecondAreOrderedBySeq(t *testing.T) {
	s := openViewerMode(t)
	ctx := context.Background()
	register(t, s, "v1", "following")
	apply(t, s, follow("v1", "carol", "f1", 1), post("carol", "p1", 2))
	const at = 1_800_000_000_000_000
	deactivate := AccountStatus{DID: did("carol"), Status: "deactivated", TimeUS: at + 5, RelayTimeUS: at, RelaySeq: 7}
	reactivate := AccountStatus{DID: did("carol"), Active: true, TimeUS: at + 3, RelayTimeUS: at, RelaySeq: 8}
	hostile := AccountStatus{DID: did("carol"), Status: "takendown", TimeUS: at + 6, RelayTimeUS: at, RelaySeq: 1 << 62}
	later := AccountStatus{DID: did("carol"), Active: true, TimeUS: at + 7, RelayTimeUS: at + 1000, RelaySeq: 9}
	steps := []struct {
		name   string
		events []AccountStatus
		want   []string
	}{
		{"deactivated", []AccountStatus{deactivate}, nil},
		{"reactivated in the same millisecond", []AccountStatus{reactivate}, []string{"p1"}},
		{"replayed", []AccountStatus{deactivate, reactivate, deactivate}, []string{"p1"}},
		{"a huge seq", []AccountStatus{hostile}, nil},
		{"a later change", []AccountStatus{later}, []string{"p1"}},
	}
	for _, st := range steps {
		for _, a := range st.events {
			if _, err := s.ApplyBatch(ctx, &Batch{Accounts: []AccountStatus{a}, Cursor: StreamCursor{TimeUS: a.TimeUS}}); err != nil {
				t.Fatal(err)
			}
		}
		if got := feedRKeys(t, s, "following", "v1", postNSID); !slices.Equal(got, st.want) {
			t.Errorf("%s: v1's feed = %v, want %v", st.name, got, st.want)
		}
	}
}

// A status stored as a time_us (before schema 0018, or from an event with
// no relay time) is compared with the next event's time_us, not its relay
// time: a host stamps time_us when it reads the event, after the relay's
// time, by its lag (seconds while it catches up). A deactivation stored
// so, then a reactivation a second later whose relay time fell before
// that time_us, was taken for older and ignored by the first build to
// read relay times: the account's posts stayed hidden for good, where the
// build before had applied it.
func TestAReactivationAfterAStatusStoredByTimeUSIsApplied(t *testing.T) {
	s := openViewerMode(t)
	ctx := context.Background()
	register(t, s, "v1", "following")
	apply(t, s, follow("v1", "carol", "f1", 1), post("carol", "p1", 2))
	const relay, lag = 1_800_000_000_000_000, 1_500_000 // the host reads events 1.5 s late
	deactivate := AccountStatus{DID: did("carol"), Status: "deactivated", TimeUS: relay + lag}
	reactivate := AccountStatus{DID: did("carol"), Active: true, TimeUS: relay + 1_000_000 + lag,
		RelayTimeUS: relay + 1_000_000, RelaySeq: 9}
	replayed := deactivate
	replayed.RelayTimeUS, replayed.RelaySeq = relay, 8
	for _, st := range []struct {
		name  string
		event AccountStatus
		want  []string
	}{
		{"deactivated, no relay time", deactivate, nil},
		{"reactivated a second later", reactivate, []string{"p1"}},
		// Replayed after the upgrade, it carries its relay time.
		{"the deactivation replayed", replayed, []string{"p1"}},
	} {
		if _, err := s.ApplyBatch(ctx, &Batch{Accounts: []AccountStatus{st.event}, Cursor: StreamCursor{TimeUS: st.event.TimeUS}}); err != nil {
			t.Fatal(err)
		}
		if got := feedRKeys(t, s, "following", "v1", postNSID); !slices.Equal(got, st.want) {
			t.Errorf("%s: v1's feed = %v, want %v", st.name, got, st.want)
		}
	}
}
