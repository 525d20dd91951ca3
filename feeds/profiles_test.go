package feeds

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const avatarCID = "bafkreibme22gw2h7y2h7tg2fhqotaqjucnbc24deqo72b6mkl2egezxhvy"

func TestParseProfile(t *testing.T) {
	long := strings.Repeat("é", MaxDisplayNameBytes/2+1) // 642 bytes
	for _, tc := range []struct {
		name string
		raw  string
		ok   bool
		want ProfileFields
	}{
		{"full", `{"$type":"app.bsky.actor.profile","displayName":"Alice","description":"hi","avatar":{"$type":"blob","ref":{"$link":"` + avatarCID + `"},"mimeType":"image/jpeg","size":1234},"banner":{"x":1}}`,
			true, ProfileFields{DisplayName: "Alice", Description: "hi", Avatar: &Blob{CID: avatarCID, MimeType: "image/jpeg", Size: 1234}}},
		{"legacy blob", `{"$type":"app.bsky.actor.profile","avatar":{"cid":"` + avatarCID + `","mimeType":"image/png"}}`,
			true, ProfileFields{Avatar: &Blob{CID: avatarCID, MimeType: "image/png"}}},
		{"empty", `{"$type":"app.bsky.actor.profile"}`, true, ProfileFields{}},
		{"bad fields are left out", `{"$type":"app.bsky.actor.profile","displayName":7,"description":"` + long + long + long + long + long + `","avatar":{"$type":"blob","ref":{"$link":"not a cid"},"mimeType":"image/png","size":1}}`,
			true, ProfileFields{Dropped: DroppedDisplayName | DroppedDescription | DroppedAvatar}},
		{"display name over its bound", `{"$type":"app.bsky.actor.profile","displayName":"` + long + `","description":"kept"}`,
			true, ProfileFields{Description: "kept", Dropped: DroppedDisplayName}},
		{"avatar without a mime type", `{"$type":"app.bsky.actor.profile","avatar":{"$type":"blob","ref":{"$link":"` + avatarCID + `"},"size":1}}`,
			true, ProfileFields{Dropped: DroppedAvatar}},
		{"other type", `{"$type":"app.bsky.feed.post","displayName":"x"}`, false, ProfileFields{}},
		// Keys match exactly, as Bluesky reads them (a review found
		// encoding/json's case folding choosing "DisplayName").
		{"keys in another case are not the fields", `{"$type":"app.bsky.actor.profile","displayName":"Alice","DisplayName":"Mallory","deſcription":"x","AVATAR":{"cid":"` + avatarCID + `","mimeType":"image/png"}}`,
			true, ProfileFields{DisplayName: "Alice"}},
		{"$TYPE is not $type", `{"$TYPE":"app.bsky.actor.profile","DISPLAYNAME":"Mallory"}`, false, ProfileFields{}},
		{"blob keys in another case", `{"$type":"app.bsky.actor.profile","avatar":{"$type":"blob","REF":{"$link":"` + avatarCID + `"},"mimeType":"image/png","size":1}}`,
			true, ProfileFields{Dropped: DroppedAvatar}},
		{"empty strings are kept, not dropped", `{"$type":"app.bsky.actor.profile","displayName":"","description":""}`,
			true, ProfileFields{}},
		{"not an object", `["app.bsky.actor.profile"]`, false, ProfileFields{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParseProfile(json.RawMessage(tc.raw))
			if ok != tc.ok || fmt.Sprint(got.DisplayName, got.Description) != fmt.Sprint(tc.want.DisplayName, tc.want.Description) ||
				(got.Avatar == nil) != (tc.want.Avatar == nil) || (got.Avatar != nil && *got.Avatar != *tc.want.Avatar) ||
				got.Dropped != tc.want.Dropped {
				t.Errorf("ParseProfile = %+v %v (avatar %+v), want %+v %v", got, ok, got.Avatar, tc.want, tc.ok)
			}
		})
	}
}

// A stored profile's fields left out are counted by field: hostile or
// broken records were dropped without a trace.
func TestDroppedProfileFieldsAreCounted(t *testing.T) {
	s := mustOpenWith(t, Options{Path: t.TempDir() + "/appview.db", Feeds: defaultFeeds, IndexAll: true, Profiles: true,
		Metrics: NewMetrics(prometheus.NewRegistry())})
	apply(t, s, post("carol", "p1", 1)) // carol is known
	c := profileChange("carol", OpCreate, 2, "ok")
	c.Record = json.RawMessage(`{"$type":"app.bsky.actor.profile","displayName":"` + strings.Repeat("x", MaxDisplayNameBytes+1) + `","description":"kept","avatar":{"cid":"nope"}}`)
	apply(t, s, c)
	for field, want := range map[string]float64{"displayName": 1, "description": 0, "avatar": 1} {
		if got := testutil.ToFloat64(s.metrics.profileDrops.WithLabelValues(field)); got != want {
			t.Errorf("appview_profile_fields_dropped_total{field=%q} = %v, want %v", field, got, want)
		}
	}
	apply(t, s, c) // a replay is a duplicate, not counted again
	if got := testutil.ToFloat64(s.metrics.profileDrops.WithLabelValues("displayName")); got != 1 {
		t.Errorf("after a replay the count is %v, want 1", got)
	}
}

func profileChange(author string, op Operation, n int64, displayName string) Change {
	c := Change{DID: did(author), Collection: ProfileCollection, RKey: ProfileRKey, Op: op, Rev: rev(n), TimeUS: n}
	if op != OpDelete {
		c.CID = fmt.Sprintf("bafyprofile%d", n)
		c.Record = json.RawMessage(fmt.Sprintf(`{"$type":"app.bsky.actor.profile","displayName":%q,"avatar":{"$type":"blob","ref":{"$link":%q},"mimeType":"image/jpeg","size":9}}`, displayName, avatarCID))
	}
	return c
}

func readProfile(t *testing.T, s *Store, author string) Profile {
	t.Helper()
	ps, err := s.Profiles(context.Background(), []syntax.DID{did(author)})
	if err != nil || len(ps) != 1 {
		t.Fatalf("profiles: %v %v", ps, err)
	}
	return ps[0]
}

// A viewer-mode store with profiles: alice reads, and follows carol.
func profileStore(t *testing.T) *Store {
	t.Helper()
	s := mustOpenWith(t, Options{Path: t.TempDir() + "/appview.db", Feeds: defaultFeeds, Profiles: true})
	if _, err := s.RegisterViewer(context.Background(), did("alice"), "following", time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	apply(t, s, follow("alice", "carol", "f1", 10))
	return s
}

func TestProfilesFromTheStream(t *testing.T) {
	s := profileStore(t)

	// Carol is followed: her profile is stored. A stranger's is not, and
	// no actor row is made for it.
	res := apply(t, s, profileChange("carol", OpCreate, 20, "Carol"), profileChange("stranger", OpCreate, 21, "Nobody"))
	if res.Applied != 1 || res.OutOfScope != 1 {
		t.Fatalf("create: %+v", res)
	}
	p := readProfile(t, s, "carol")
	if !p.Known || !p.Present || p.Fields.DisplayName != "Carol" || p.CID != "bafyprofile20" ||
		p.Fields.Avatar == nil || p.Fields.Avatar.CID != avatarCID || p.HandleKnown {
		t.Fatalf("carol = %+v", p)
	}
	if p := readProfile(t, s, "stranger"); p.Known || p.HandleKnown {
		t.Fatalf("stranger = %+v", p)
	}

	// A replay (same rev) and an older update change nothing; a newer one does.
	if res := apply(t, s, profileChange("carol", OpCreate, 20, "Carol"), profileChange("carol", OpUpdate, 15, "Old")); res.Duplicates != 2 {
		t.Fatalf("replays: %+v", res)
	}
	apply(t, s, profileChange("carol", OpUpdate, 30, "Carol B"))
	if p := readProfile(t, s, "carol"); p.Fields.DisplayName != "Carol B" {
		t.Fatalf("after update = %+v", p)
	}
	// A record key other than self is not the profile.
	other := profileChange("carol", OpUpdate, 31, "Not me")
	other.RKey = "other"
	if res := apply(t, s, other); res.Ignored != 1 {
		t.Fatalf("rkey other: %+v", res)
	}

	// Delete: known absent, fields gone; an older create replayed after it
	// does not bring it back.
	apply(t, s, profileChange("carol", OpDelete, 40, ""))
	if p := readProfile(t, s, "carol"); !p.Known || p.Present || p.Fields.DisplayName != "" || p.Fields.Avatar != nil {
		t.Fatalf("after delete = %+v", p)
	}
	if res := apply(t, s, profileChange("carol", OpCreate, 35, "Ghost")); res.Duplicates != 1 {
		t.Fatalf("replayed create after delete: %+v", res)
	}

	// Nobody follows carol any more: her profile is forgotten, so it is
	// not served stale when she comes back into scope.
	apply(t, s, profileChange("carol", OpCreate, 50, "Carol C"), unfollow("alice", "f1", 51))
	if p := readProfile(t, s, "carol"); p.Known {
		t.Fatalf("after unfollow = %+v", p)
	}
}

func TestFetchedProfilesAndHandles(t *testing.T) {
	s := profileStore(t)
	ctx := context.Background()
	at := time.Unix(100, 0)

	// A fetch stores the record and the verified handle.
	if err := s.StoreFetchedProfile(ctx, FetchedProfile{
		DID: did("carol"), HandleResolved: true, Handle: "carol.test",
		RecordFetched: true, Present: true, CID: "bafyfetched", Fields: ProfileFields{DisplayName: "Fetched"}, At: at,
	}); err != nil {
		t.Fatal(err)
	}
	p := readProfile(t, s, "carol")
	if !p.Complete() || p.Handle != "carol.test" || p.Fields.DisplayName != "Fetched" {
		t.Fatalf("fetched = %+v", p)
	}
	// Any stream change supersedes the fetched copy (it has no rev)…
	apply(t, s, profileChange("carol", OpUpdate, 20, "Streamed"))
	// …and a fetch that finishes later does not override the stream.
	if err := s.StoreFetchedProfile(ctx, FetchedProfile{DID: did("carol"), RecordFetched: true, Present: true, CID: "bafylate", Fields: ProfileFields{DisplayName: "Late"}, At: at}); err != nil {
		t.Fatal(err)
	}
	if p := readProfile(t, s, "carol"); p.Fields.DisplayName != "Streamed" || p.Handle != "carol.test" {
		t.Fatalf("after late fetch = %+v", p)
	}

	// An identity event forgets the handle: it is verified again later.
	if _, err := s.ApplyBatch(ctx, &Batch{Identities: []syntax.DID{did("carol")}, Cursor: StreamCursor{TimeUS: 60}}); err != nil {
		t.Fatal(err)
	}
	if p := readProfile(t, s, "carol"); p.HandleKnown || !p.Known {
		t.Fatalf("after identity event = %+v", p)
	}
	// No verified handle is remembered as such; a fetch for an unknown
	// account stores nothing.
	if err := s.StoreFetchedProfile(ctx, FetchedProfile{DID: did("carol"), HandleResolved: true, At: at, IdentitySeq: s.IdentitySeq()}); err != nil {
		t.Fatal(err)
	}
	if p := readProfile(t, s, "carol"); !p.HandleKnown || p.Handle != "" {
		t.Fatalf("no handle = %+v", p)
	}
	if err := s.StoreFetchedProfile(ctx, FetchedProfile{DID: did("nobody"), HandleResolved: true, Handle: "x.test", RecordFetched: true, At: at}); err != nil {
		t.Fatal(err)
	}
	if p := readProfile(t, s, "nobody"); p.HandleKnown || p.Known {
		t.Fatalf("unknown account = %+v", p)
	}

	// Fetched absent: known, not present.
	apply(t, s, follow("alice", "dave", "f2", 70))
	if err := s.StoreFetchedProfile(ctx, FetchedProfile{DID: did("dave"), RecordFetched: true, Present: false, At: at}); err != nil {
		t.Fatal(err)
	}
	if p := readProfile(t, s, "dave"); !p.Known || p.Present {
		t.Fatalf("absent = %+v", p)
	}
}

// Without hydration, profile records are not the store's business.
func TestProfilesOffIgnoresProfileRecords(t *testing.T) {
	s := mustOpenWith(t, Options{Path: t.TempDir() + "/appview.db", Feeds: defaultFeeds, IndexAll: true})
	apply(t, s, follow("alice", "carol", "f1", 10))
	if res := apply(t, s, profileChange("carol", OpCreate, 20, "Carol")); res.Ignored != 1 || res.Applied != 0 {
		t.Fatalf("profile with hydration off: %+v", res)
	}
	if p := readProfile(t, s, "carol"); p.Known {
		t.Fatalf("carol = %+v", p)
	}
}

// Turning hydration off forgets stored profiles and handles.
func TestScopeChangeForgetsProfiles(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	ctx := context.Background()
	with := []string{string(followNSID), string(ProfileCollection), string(postNSID)}
	s := mustOpenWith(t, Options{Path: path, Feeds: defaultFeeds, IndexAll: true, Profiles: true})
	if _, err := s.CheckScope(ctx, with); err != nil {
		t.Fatal(err)
	}
	apply(t, s, follow("alice", "carol", "f1", 10), profileChange("carol", OpCreate, 20, "Carol"))
	if err := s.StoreFetchedProfile(ctx, FetchedProfile{DID: did("carol"), HandleResolved: true, Handle: "carol.test", At: time.Unix(1, 0)}); err != nil {
		t.Fatal(err)
	}
	if p := readProfile(t, s, "carol"); !p.Complete() {
		t.Fatalf("before = %+v", p)
	}
	change, err := s.CheckScope(ctx, []string{string(followNSID), string(postNSID)})
	if err != nil || change == nil || len(change.Removed) != 1 {
		t.Fatalf("scope change = %+v, %v", change, err)
	}
	if p := readProfile(t, s, "carol"); p.Known || p.HandleKnown {
		t.Fatalf("after hydration off = %+v", p)
	}
}

// The hydration read is index lookups, never a scan of actors.
func TestProfilesQueryPlan(t *testing.T) {
	s := profileStore(t)
	rows, err := s.reader.Query(`EXPLAIN QUERY PLAN `+readProfilesSQL, `["did:plc:carol"]`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	joined := strings.Join(plan, "\n")
	if strings.Contains(joined, "SCAN a") || !strings.Contains(joined, "SEARCH a USING") || !strings.Contains(joined, "SEARCH p USING") {
		t.Errorf("plan:\n%s", joined)
	}
}

// A fetch resolved carol's old handle, then her identity event committed
// (forgetting the handle), then the fetch stored what it resolved: the old
// handle must not come back for good. It stays unknown, fetched again at
// the next read; a fetch started after the event stores its handle.
func TestAHandleResolvedBeforeAnIdentityEventIsNotStored(t *testing.T) {
	s := profileStore(t)
	ctx := context.Background()
	at := time.Unix(100, 0)
	before := s.IdentitySeq()
	if _, err := s.ApplyBatch(ctx, &Batch{Identities: []syntax.DID{did("carol")}, Cursor: StreamCursor{TimeUS: 60}}); err != nil {
		t.Fatal(err)
	}
	// Another account's fetch from before the event is not held back.
	if err := s.StoreFetchedProfile(ctx, FetchedProfile{DID: did("alice"), HandleResolved: true, Handle: "alice.test", At: at, IdentitySeq: before}); err != nil {
		t.Fatal(err)
	}
	if p := readProfile(t, s, "alice"); p.Handle != "alice.test" || !p.HandleCheckedAt.Equal(at) {
		t.Errorf("alice's handle = %+v, want alice.test checked at %v", p, at)
	}
	if err := s.StoreFetchedProfile(ctx, FetchedProfile{DID: did("carol"), HandleResolved: true, Handle: "old.test", At: at, IdentitySeq: before}); err != nil {
		t.Fatal(err)
	}
	if p := readProfile(t, s, "carol"); p.HandleKnown {
		t.Errorf("a handle resolved before the identity event was stored: %+v", p)
	}
	if err := s.StoreFetchedProfile(ctx, FetchedProfile{DID: did("carol"), HandleResolved: true, Handle: "new.test", At: at, IdentitySeq: s.IdentitySeq()}); err != nil {
		t.Fatal(err)
	}
	if p := readProfile(t, s, "carol"); p.Handle != "new.test" {
		t.Errorf("a handle resolved after the identity event = %+v, want new.test", p)
	}
}

// A gap loses identity events and profile changes: every stored handle
// and profile is forgotten, so each is fetched again.
func TestAGapForgetsStoredProfiles(t *testing.T) {
	s := profileStore(t)
	ctx := context.Background()
	if err := s.StoreFetchedProfile(ctx, FetchedProfile{
		DID: did("carol"), HandleResolved: true, Handle: "carol.test",
		RecordFetched: true, Present: true, CID: "bafyfetched", Fields: ProfileFields{DisplayName: "Fetched"}, At: time.Unix(100, 0),
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordGap(ctx, Gap{Detected: time.Unix(200, 0), CursorUS: 1, Size: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if p := readProfile(t, s, "carol"); p.HandleKnown || p.Known {
		t.Errorf("after a gap carol's profile is %+v, want nothing known", p)
	}
}

// Past its bound the identity log forgets, and then counts every check
// from before as raced rather than miss an event.
func TestTheIdentityLogIsBoundedAndErrsOnTheSafeSide(t *testing.T) {
	var l identityLog
	start := l.seq
	for i := range maxIdentityLog {
		l.changed([]syntax.DID{did(fmt.Sprint("a", i))})
	}
	if l.changedSince(did("other"), start) {
		t.Fatal("an account with no event counted as changed before the log was full")
	}
	mid := l.seq
	l.changed([]syntax.DID{did("last")})
	if len(l.last) != 1 {
		t.Fatalf("the full log kept %d accounts", len(l.last))
	}
	if !l.changedSince(did("other"), start) {
		t.Error("a check from before the forgotten events was not counted as raced")
	}
	if l.changedSince(did("other"), mid) || !l.changedSince(did("last"), mid) {
		t.Error("a check from after the forgotten events: wrong answer")
	}
}

// A handle fetch under way when a gap is recorded resolved it before the
// gap was known: it must not store it as fresh.
func TestAHandleFetchAcrossAGapIsNotStored(t *testing.T) {
	s := profileStore(t)
	ctx := context.Background()
	seq := s.IdentitySeq()
	if _, err := s.RecordGap(ctx, Gap{Detected: time.Unix(200, 0), CursorUS: 1, Size: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreFetchedProfile(ctx, FetchedProfile{DID: did("carol"), HandleResolved: true, Handle: "old.test",
		At: time.Unix(150, 0), IdentitySeq: seq}); err != nil {
		t.Fatal(err)
	}
	if p := readProfile(t, s, "carol"); p.HandleKnown {
		t.Errorf("a handle resolved before the gap was stored: %+v", p)
	}
}

// An operator's reset in another process records a gap: the daemon learns
// of it when it adopts the reset, empties its identity caches (OnGap) and
// counts the handle fetches begun before it as raced.
func TestAGapRecordedByAnOperatorReachesTheDaemon(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	s := mustOpenWith(t, Options{Path: path, Feeds: defaultFeeds, Profiles: true})
	ctx := context.Background()
	if _, err := s.RegisterViewer(ctx, did("alice"), "following", time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	apply(t, s, follow("alice", "carol", "f1", 10))
	var purged int
	s.OnGap(func() { purged++ })
	seq := s.IdentitySeq()

	op := mustOpenWith(t, Options{Path: path, Feeds: defaultFeeds, Profiles: true, Existing: true})
	if _, err := op.ResetJetstream(ctx, time.Time{}, "ops", time.Unix(10_000, 0)); err != nil { // to the live tip
		t.Fatal(err)
	}
	apply(t, s, post("carol", "p1", 20)) // the daemon's next batch adopts the reset
	if purged != 1 {
		t.Errorf("OnGap ran %d times, want once", purged)
	}
	if err := s.StoreFetchedProfile(ctx, FetchedProfile{DID: did("carol"), HandleResolved: true, Handle: "old.test",
		At: time.Unix(150, 0), IdentitySeq: seq}); err != nil {
		t.Fatal(err)
	}
	if p := readProfile(t, s, "carol"); p.HandleKnown {
		t.Errorf("a handle resolved before the operator's gap was stored: %+v", p)
	}
	apply(t, s, post("carol", "p2", 30))
	if purged != 1 {
		t.Errorf("OnGap ran again for the same gap (%d)", purged)
	}
}

// A profile fetch that ran while its account left scope stores no record,
// whether the account is still out of scope when the fetch ends or was
// followed again meanwhile: the unfollow dropped the profile on purpose
// and the stream's changes to it were ignored while the account was out
// of scope, so the copy was served stale (here: deleted meanwhile) when
// the account came back, and never fetched again (found by two reviews).
func TestAFetchedProfileOfAnAccountOutOfScopeIsNotStored(t *testing.T) {
	for _, followedAgain := range []bool{false, true} {
		t.Run(fmt.Sprint("followed again before the fetch ends: ", followedAgain), func(t *testing.T) {
			s := profileStore(t) // alice views, follows carol
			ctx := context.Background()
			seq := s.IdentitySeq() // the fetch starts
			apply(t, s, unfollow("alice", "f1", 20))
			apply(t, s, profileChange("carol", OpDelete, 30, "")) // ignored: out of scope
			if followedAgain {
				apply(t, s, follow("alice", "carol", "f2", 40))
			}
			if err := s.StoreFetchedProfile(ctx, FetchedProfile{
				DID: did("carol"), HandleResolved: true, Handle: "carol.test",
				RecordFetched: true, Present: true, CID: "bafyfetched", Fields: ProfileFields{DisplayName: "Old name"},
				At: time.Unix(100, 0), IdentitySeq: seq,
			}); err != nil {
				t.Fatal(err)
			}
			if !followedAgain {
				apply(t, s, follow("alice", "carol", "f2", 40))
			}
			if p := readProfile(t, s, "carol"); p.Known {
				t.Fatalf("carol, followed again, is served the profile fetched while she left scope: %+v", p)
			}
		})
	}
}

// A profile fetch begun before carol's account was deleted ends after the
// deletion committed: it must store neither the copy nor the handle it
// read before, as when she leaves the scope (dropProfile).
func TestAFetchSpanningAnAccountDeletionIsNotStored(t *testing.T) {
	s := profileStore(t) // alice views, follows carol
	ctx := context.Background()
	apply(t, s, profileChange("carol", OpCreate, 20, "Carol"))

	seq := s.IdentitySeq() // a read's fetch of carol starts
	if _, err := s.ApplyBatch(ctx, &Batch{Cursor: StreamCursor{TimeUS: 30},
		Accounts: []AccountStatus{{DID: did("carol"), Active: false, Status: "deleted", TimeUS: 30}}}); err != nil {
		t.Fatal(err)
	}
	if p := readProfile(t, s, "carol"); p.Known {
		t.Fatalf("the deletion kept carol's profile: %+v", p)
	}
	if err := s.StoreFetchedProfile(ctx, FetchedProfile{
		DID: did("carol"), HandleResolved: true, Handle: "carol.test",
		RecordFetched: true, Present: true, CID: "bafyfetched", Fields: ProfileFields{DisplayName: "Carol (before deletion)"},
		At: time.Unix(100, 0), IdentitySeq: seq,
	}); err != nil {
		t.Fatal(err)
	}
	if p := readProfile(t, s, "carol"); p.Known || p.HandleKnown {
		t.Fatalf("a fetch begun before carol's account was deleted stored her profile after it: %+v", p)
	}
}

// A fetch that begins after carol's account was deleted (queued by a read
// of a page taken before the deletion, behind other fetches) finds no
// identity event after its start, but the account is deleted: it stores
// neither the handle nor the copy it read, as a replayed stream change of
// her profile stores nothing. Her followers' follows keep her in scope.
func TestAFetchBegunAfterAnAccountDeletionIsNotStored(t *testing.T) {
	s := profileStore(t) // alice views, follows carol
	ctx := context.Background()
	if _, err := s.ApplyBatch(ctx, &Batch{Cursor: StreamCursor{TimeUS: 30},
		Accounts: []AccountStatus{{DID: did("carol"), Active: false, Status: "deleted", TimeUS: 30}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreFetchedProfile(ctx, FetchedProfile{
		DID: did("carol"), HandleResolved: true, Handle: "carol.test",
		RecordFetched: true, Present: true, CID: "bafyfetched", Fields: ProfileFields{DisplayName: "Carol (deleted)"},
		At: time.Unix(100, 0), IdentitySeq: s.IdentitySeq(),
	}); err != nil {
		t.Fatal(err)
	}
	if p := readProfile(t, s, "carol"); p.Known || p.HandleKnown {
		t.Fatalf("a fetch begun after carol's account was deleted stored: %+v", p)
	}
	// Once she is back, a fetch stores what it finds.
	if _, err := s.ApplyBatch(ctx, &Batch{Cursor: StreamCursor{TimeUS: 40},
		Accounts: []AccountStatus{{DID: did("carol"), Active: true, TimeUS: 40}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreFetchedProfile(ctx, FetchedProfile{
		DID: did("carol"), HandleResolved: true, Handle: "carol.test",
		RecordFetched: true, Present: true, CID: "bafyfetched", Fields: ProfileFields{DisplayName: "Carol"},
		At: time.Unix(200, 0), IdentitySeq: s.IdentitySeq(),
	}); err != nil {
		t.Fatal(err)
	}
	if p := readProfile(t, s, "carol"); !p.Known || !p.HandleKnown || p.Fields.DisplayName != "Carol" {
		t.Fatalf("after the reactivation carol = %+v", p)
	}
}

// A deleted account's verified handle is forgotten with its profile.
func TestAnAccountDeletionForgetsItsHandle(t *testing.T) {
	s := profileStore(t)
	ctx := context.Background()
	if err := s.StoreFetchedProfile(ctx, FetchedProfile{
		DID: did("carol"), HandleResolved: true, Handle: "carol.test",
		At: time.Unix(100, 0), IdentitySeq: s.IdentitySeq(),
	}); err != nil {
		t.Fatal(err)
	}
	if p := readProfile(t, s, "carol"); !p.HandleKnown {
		t.Fatalf("the fetched handle was not stored: %+v", p)
	}
	if _, err := s.ApplyBatch(ctx, &Batch{Cursor: StreamCursor{TimeUS: 30},
		Accounts: []AccountStatus{{DID: did("carol"), Active: false, Status: "deleted", TimeUS: 30}}}); err != nil {
		t.Fatal(err)
	}
	if p := readProfile(t, s, "carol"); p.HandleKnown {
		t.Fatalf("the deletion kept carol's handle: %+v", p)
	}
}

// A deleted account keeps no profile: a replayed profile change from
// before its deletion (a reconnect's rewind) stored the row again. Once
// the account comes back, its changes are kept as before.
func TestAReplayedProfileChangeOfADeletedAccountIsNotStored(t *testing.T) {
	s := profileStore(t)
	ctx := context.Background()
	apply(t, s, profileChange("carol", OpCreate, 20, "Carol"))
	if _, err := s.ApplyBatch(ctx, &Batch{Cursor: StreamCursor{TimeUS: 30},
		Accounts: []AccountStatus{{DID: did("carol"), Active: false, Status: "deleted", TimeUS: 30}}}); err != nil {
		t.Fatal(err)
	}
	if res := apply(t, s, profileChange("carol", OpUpdate, 25, "Carol again")); res.Duplicates != 1 {
		t.Errorf("a replayed change of deleted carol's profile: %+v", res)
	}
	if p := readProfile(t, s, "carol"); p.Known {
		t.Fatalf("deleted carol has a profile again: %+v", p)
	}
	if _, err := s.ApplyBatch(ctx, &Batch{Cursor: StreamCursor{TimeUS: 40},
		Accounts: []AccountStatus{{DID: did("carol"), Active: true, TimeUS: 40}}}); err != nil {
		t.Fatal(err)
	}
	apply(t, s, profileChange("carol", OpCreate, 50, "Carol is back"))
	if p := readProfile(t, s, "carol"); p.Fields.DisplayName != "Carol is back" {
		t.Fatalf("after the reactivation carol = %+v", p)
	}
}
