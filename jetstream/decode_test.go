package jetstream

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

const (
	followNSID = "app.bsky.graph.follow"
	postNSID   = "app.bsky.feed.post"
	testCID    = "bafyreibaowdggfizbfrk2ypwue7e2mw5a3mjn665rxjs6gx7pd7oxfha3y"
)

var (
	followFrame   = `{"did":"did:plc:arbdlauvzwscggnm7kimjnwa","time_us":1795975616983633,"cursor":2327,"kind":"commit","commit":{"rev":"3ke6kg3wlcg22","operation":"create","collection":"app.bsky.graph.follow","rkey":"22apeetluw5iq","record":{"$type":"app.bsky.graph.follow","createdAt":"2024-10-02T08:19:35Z","subject":"did:plc:ozpsb6zlp2oxm6gm4ekdkga3"},"cid":"bafyreibaowdggfizbfrk2ypwue7e2mw5a3mjn665rxjs6gx7pd7oxfha3y"}}`
	postFrame     = `{"did":"did:plc:kdmhsqjgb4mmrul5nxbat2xs","time_us":1795975616991124,"kind":"commit","commit":{"rev":"3ke6kg3wlch22","operation":"update","collection":"app.bsky.feed.post","rkey":"3kbbpidw2r7zx","record":{"$type":"app.bsky.feed.post","createdAt":"2024-10-02T21:28:22Z","langs":["en"],"text":"hello"},"cid":"bafyreigwuiotmkaytriom4alrxkamtlzsf35xljotttx6oy3hd63xuxyyq"}}`
	deleteFrame   = `{"did":"did:plc:wyhzg3vvvaznoiytis5ijd7x","time_us":1795975958545820,"kind":"commit","commit":{"rev":"3ke6kg3wr6k22","operation":"delete","collection":"app.bsky.graph.follow","rkey":"3kapxylqdspxn"}}`
	identityFrame = `{"did":"did:plc:laugnykec7eagsmimcahomfb","time_us":1795975629467810,"kind":"identity","identity":{"did":"did:plc:laugnykec7eagsmimcahomfb","handle":"alice.example.com","seq":1315,"time":"2024-11-14T22:13:20.001Z"}}`
	accountFrame  = `{"did":"did:plc:ufbl4k27gp6kzas5glhz7fim","time_us":1725516665333808,"kind":"account","account":{"active":false,"status":"deactivated","did":"did:plc:ufbl4k27gp6kzas5glhz7fim","seq":1409753013,"time":"2024-09-05T06:11:04.870Z"}}`
)

// testNow is the test decoder's clock: a few minutes after the newest
// sample frame, so the sample frames stay valid whenever the tests run.
var testNow = time.Date(2026, 11, 29, 18, 15, 0, 0, time.UTC)

func testDecoder() *Decoder {
	return NewDecoder(DecoderConfig{
		FollowCollections: []syntax.NSID{followNSID},
		Now:               func() time.Time { return testNow },
	})
}

// commitFrame builds a commit frame around a commit body, for table tests.
func commitFrame(commit string) string {
	return `{"did":"did:plc:arbdlauvzwscggnm7kimjnwa","time_us":1795975616983633,"cursor":7,"kind":"commit","commit":` + commit + `}`
}

func postCommit(record string) string {
	return `{"rev":"3ke6kg3wlch22","operation":"create","collection":"app.bsky.feed.post","rkey":"3kbbpidw2r7zx","cid":"` + testCID + `","record":` + record + `}`
}

func usOf(t *testing.T, s string) int64 {
	t.Helper()
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixMicro()
}

func TestDecodeValid(t *testing.T) {
	dec := testDecoder()

	t.Run("follow", func(t *testing.T) {
		ev, err := dec.Decode([]byte(followFrame))
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind != KindCommit || ev.DID != "did:plc:arbdlauvzwscggnm7kimjnwa" || ev.TimeUS != 1795975616983633 || ev.Seq != 2327 {
			t.Fatalf("envelope: %+v", ev)
		}
		c := ev.Commit
		if c.Operation != OpCreate || c.Collection != followNSID || c.RKey != "22apeetluw5iq" || c.Rev != "3ke6kg3wlcg22" || c.CID != testCID {
			t.Fatalf("commit: %+v", c)
		}
		if c.Subject != "did:plc:ozpsb6zlp2oxm6gm4ekdkga3" {
			t.Fatalf("subject = %q", c.Subject)
		}
		if want := usOf(t, "2024-10-02T08:19:35Z"); c.CreatedAtUS != want {
			t.Fatalf("createdAt = %d, want %d", c.CreatedAtUS, want)
		}
		if !json.Valid(c.Record) || !strings.Contains(string(c.Record), `"subject"`) {
			t.Fatalf("record = %s", c.Record)
		}
	})

	t.Run("post update", func(t *testing.T) {
		ev, err := dec.Decode([]byte(postFrame))
		if err != nil {
			t.Fatal(err)
		}
		c := ev.Commit
		if ev.Seq != 0 || c.Operation != OpUpdate || c.Collection != postNSID || c.Subject != "" {
			t.Fatalf("event: %+v commit: %+v", ev, c)
		}
		if want := usOf(t, "2024-10-02T21:28:22Z"); c.CreatedAtUS != want {
			t.Fatalf("createdAt = %d, want %d", c.CreatedAtUS, want)
		}
	})

	t.Run("delete", func(t *testing.T) {
		ev, err := dec.Decode([]byte(deleteFrame))
		if err != nil {
			t.Fatal(err)
		}
		c := ev.Commit
		if c.Operation != OpDelete || c.Record != nil || c.CID != "" || c.Subject != "" || c.RKey != "3kapxylqdspxn" {
			t.Fatalf("commit: %+v", c)
		}
	})

	t.Run("identity", func(t *testing.T) {
		ev, err := dec.Decode([]byte(identityFrame))
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind != KindIdentity || ev.Identity == nil || ev.Identity.Handle != "alice.example.com" || ev.Commit != nil {
			t.Fatalf("event: %+v", ev)
		}
	})

	t.Run("identity without a valid handle is kept", func(t *testing.T) {
		for _, h := range []string{``, `,"handle":"not a handle"`} {
			ev, err := dec.Decode([]byte(`{"did":"did:plc:laugnykec7eagsmimcahomfb","time_us":5,"kind":"identity","identity":{"seq":1` + h + `}}`))
			if err != nil {
				t.Fatal(err)
			}
			if ev.Identity == nil || ev.Identity.Handle != "" {
				t.Fatalf("event: %+v", ev)
			}
		}
	})

	t.Run("account", func(t *testing.T) {
		ev, err := dec.Decode([]byte(accountFrame))
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind != KindAccount || ev.Account == nil || ev.Account.Active || ev.Account.Status != "deactivated" {
			t.Fatalf("event: %+v", ev)
		}
		if want := usOf(t, "2024-09-05T06:11:04.870Z"); ev.Account.Time.UnixMicro() != want || ev.Account.Seq != 1409753013 {
			t.Fatalf("account.time, seq = %v, %d; want %d, 1409753013", ev.Account.Time, ev.Account.Seq, want)
		}
		long := strings.Repeat("x", maxStatusBytes)
		ev, err = dec.Decode([]byte(strings.Replace(accountFrame, "deactivated", long, 1)))
		if err != nil || ev.Account.Status != long {
			t.Fatalf("status at the length limit: %+v, %v", ev, err)
		}
	})

	// account.time orders an account's status changes (feeds), so one
	// past the skew allowance would make every later change look older:
	// it is left out, as is one that cannot be read, and the event kept.
	t.Run("account time bounded", func(t *testing.T) {
		limit := testNow.Add(DefaultMaxClockSkew)
		cases := map[string]time.Time{
			limit.Format(time.RFC3339Nano):                       limit,
			limit.Add(time.Millisecond).Format(time.RFC3339Nano): {},
			"9999-12-31T23:59:59.999Z":                           {},
			"0001-01-01T00:00:00Z":                               {},
			"yesterday":                                          {},
			"":                                                   {},
		}
		for in, want := range cases {
			frame := strings.Replace(accountFrame, "2024-09-05T06:11:04.870Z", in, 1)
			ev, err := dec.Decode([]byte(frame))
			if err != nil || ev.Account == nil || !ev.Account.Time.Equal(want) {
				t.Errorf("account.time %q: %+v, %v; want time %v", in, ev.Account, err, want)
			}
		}
	})

	// Odd relay times and sequence numbers are left out, the event kept:
	// they only order the account's events.
	t.Run("account seq and time lenient", func(t *testing.T) {
		for _, odd := range []string{
			`"seq":-5,"time":12`, `"seq":"9","time":null`, `"seq":1e3,"time":{}`,
			`"seq":99999999999999999999,"time":"2024-09-05"`, `"seq":null,"time":["x"]`,
		} {
			frame := strings.Replace(accountFrame, `"seq":1409753013,"time":"2024-09-05T06:11:04.870Z"`, odd, 1)
			ev, err := dec.Decode([]byte(frame))
			if err != nil || ev.Account == nil || ev.Account.Seq != 0 || !ev.Account.Time.IsZero() {
				t.Errorf("account with %s: %+v, %v; want it kept, with no seq or time", odd, ev.Account, err)
			}
		}
	})

	t.Run("lenient and missing createdAt", func(t *testing.T) {
		cases := map[string]int64{
			`{"$type":"app.bsky.feed.post","text":"x"}`:                                   0,
			`{"$type":"app.bsky.feed.post","createdAt":"yesterday"}`:                      0,
			`{"$type":"app.bsky.feed.post","createdAt":12}`:                               0,
			`{"$type":"app.bsky.feed.post","createdAt":"2024-10-02T21:28:22"}`:            usOf(t, "2024-10-02T21:28:22Z"),
			`{"$type":"app.bsky.feed.post","createdAt":"2024-10-02T21:28:22.123+0000"}`:   usOf(t, "2024-10-02T21:28:22.123Z"),
			`{"$type":"app.bsky.feed.post","createdAt":"2024-10-02T23:28:22.5+02:00"}`:    usOf(t, "2024-10-02T21:28:22.5Z"),
			`{"$type":"app.bsky.feed.post","createdAt":"2024-10-02T21:28:22Z","t":"\"x"}`: usOf(t, "2024-10-02T21:28:22Z"),
		}
		for record, want := range cases {
			ev, err := dec.Decode([]byte(commitFrame(postCommit(record))))
			if err != nil {
				t.Fatalf("%s: %v", record, err)
			}
			if ev.Commit.CreatedAtUS != want {
				t.Errorf("%s: createdAt = %d, want %d", record, ev.Commit.CreatedAtUS, want)
			}
		}
	})

	t.Run("escaped $type", func(t *testing.T) {
		ev, err := dec.Decode([]byte(commitFrame(postCommit(`{"$type":"app.bsky.feed\u002epost"}`))))
		if err != nil || ev.Commit.Collection != postNSID {
			t.Fatalf("event %+v, err %v", ev, err)
		}
	})

	t.Run("repost subject object is not a follow", func(t *testing.T) {
		frame := commitFrame(`{"rev":"3ke6kg3wlch22","operation":"create","collection":"app.bsky.feed.repost","rkey":"3kbbpidw2r7zx","cid":"` + testCID + `","record":{"$type":"app.bsky.feed.repost","subject":{"uri":"at://x","cid":"y"}}}`)
		if _, err := dec.Decode([]byte(frame)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("delete ignores a stray record", func(t *testing.T) {
		frame := commitFrame(`{"rev":"3ke6kg3wlch22","operation":"delete","collection":"app.bsky.feed.post","rkey":"3kbbpidw2r7zx","cid":"x","record":{"a":1}}`)
		ev, err := dec.Decode([]byte(frame))
		if err != nil || ev.Commit.Record != nil || ev.Commit.CID != "" {
			t.Fatalf("event %+v, err %v", ev, err)
		}
	})
}

// The record must not alias the frame: the client reuses its read buffer.
func TestDecodeRecordIsACopy(t *testing.T) {
	frame := []byte(postFrame)
	ev, err := testDecoder().Decode(frame)
	if err != nil {
		t.Fatal(err)
	}
	want := string(ev.Commit.Record)
	for i := range frame {
		frame[i] = 'x'
	}
	if string(ev.Commit.Record) != want {
		t.Fatalf("record changed with the frame buffer: %s", ev.Commit.Record)
	}
}

func TestDecodeDrops(t *testing.T) {
	deep := strings.Repeat(`{"a":`, 40) + `1` + strings.Repeat(`}`, 40)
	tests := []struct {
		name    string
		frame   string
		reason  string
		timeUS  int64 // expected on the skipped event, whose Seq is always 0
		decoder *Decoder
	}{
		{name: "not json", frame: `hello`, reason: ReasonBadJSON},
		{name: "empty", frame: ``, reason: ReasonBadJSON},
		{name: "array", frame: `[1,2]`, reason: ReasonBadJSON},
		// A dropped frame keeps its time, not its sequence number: a
		// frame judged bad does not choose where a reconnect resumes.
		{name: "truncated keeps its time", frame: followFrame[:200], reason: ReasonBadJSON, timeUS: 1795975616983633},
		{name: "wrong field type keeps its time", frame: `{"did":"did:plc:a","time_us":9,"cursor":3,"kind":7}`, reason: ReasonBadJSON, timeUS: 9},
		{name: "time_us a string", frame: `{"did":"did:plc:a","time_us":"9","kind":"account","account":{}}`, reason: ReasonBadJSON},
		{name: "bad utf8", frame: strings.Replace(postFrame, "hello", "hel\xfflo", 1), reason: ReasonBadUTF8, timeUS: 1795975616991124},
		{name: "no time_us", frame: `{"did":"did:plc:a","kind":"account","account":{}}`, reason: ReasonMissingField},
		{name: "negative time_us", frame: `{"did":"did:plc:a","time_us":-1,"kind":"account","account":{}}`, reason: ReasonMissingField},
		{name: "no did", frame: `{"time_us":9,"kind":"account","account":{}}`, reason: ReasonMissingField, timeUS: 9},
		{name: "bad did", frame: `{"did":"plc:a","time_us":9,"kind":"account","account":{}}`, reason: ReasonBadDID, timeUS: 9},
		{name: "no kind", frame: `{"did":"did:plc:a","time_us":9}`, reason: ReasonMissingField, timeUS: 9},
		{name: "unknown kind", frame: `{"did":"did:plc:a","time_us":9,"cursor":4,"kind":"sync"}`, reason: ReasonBadKind, timeUS: 9},
		{name: "commit missing", frame: `{"did":"did:plc:a","time_us":9,"kind":"commit"}`, reason: ReasonMissingField, timeUS: 9},
		{name: "commit null", frame: `{"did":"did:plc:a","time_us":9,"kind":"commit","commit":null}`, reason: ReasonMissingField, timeUS: 9},
		{name: "identity missing", frame: `{"did":"did:plc:a","time_us":9,"kind":"identity"}`, reason: ReasonMissingField, timeUS: 9},
		{name: "account missing", frame: `{"did":"did:plc:a","time_us":9,"kind":"account"}`, reason: ReasonMissingField, timeUS: 9},
		// Taken for false, a missing "active" hid the account's posts.
		{name: "account without active", frame: `{"did":"did:plc:a","time_us":9,"kind":"account","account":{"status":"deactivated"}}`, reason: ReasonMissingField, timeUS: 9},
		// Stored and served byte for byte, it broke strict clients' parse
		// of every page holding it (encoding/json reads it as U+FFFD).
		{name: "record with a lone surrogate", frame: commitFrame(postCommit(`{"$type":"app.bsky.feed.post","text":"\ud83d"}`)), reason: ReasonBadRecord, timeUS: 1795975616983633},
		{name: "account active null", frame: `{"did":"did:plc:a","time_us":9,"kind":"account","account":{"active":null}}`, reason: ReasonMissingField, timeUS: 9},
		{name: "bad operation", frame: commitFrame(strings.Replace(postCommit(`{}`), `"create"`, `"upsert"`, 1)), reason: ReasonBadOperation, timeUS: 1795975616983633},
		{name: "no operation", frame: commitFrame(strings.Replace(postCommit(`{}`), `"create"`, `""`, 1)), reason: ReasonMissingField, timeUS: 1795975616983633},
		{name: "no rev", frame: commitFrame(strings.Replace(postCommit(`{}`), `"3ke6kg3wlch22"`, `""`, 1)), reason: ReasonMissingField, timeUS: 1795975616983633},
		{name: "rev not a TID", frame: commitFrame(strings.Replace(postCommit(`{}`), `"3ke6kg3wlch22"`, `"r"`, 1)), reason: ReasonBadRev, timeUS: 1795975616983633},
		{name: "rev oversized", frame: commitFrame(strings.Replace(postCommit(`{}`), `"3ke6kg3wlch22"`, `"`+strings.Repeat("3ke6kg3wlch22", 1000)+`"`, 1)), reason: ReasonBadRev, timeUS: 1795975616983633},
		{name: "status oversized", frame: `{"did":"did:plc:a","time_us":9,"kind":"account","account":{"active":false,"status":"` + strings.Repeat("x", maxStatusBytes+1) + `"}}`, reason: ReasonBadStatus, timeUS: 9},
		{name: "no collection", frame: commitFrame(`{"rev":"3ke6kg3wlch22","operation":"delete","rkey":"k"}`), reason: ReasonMissingField, timeUS: 1795975616983633},
		{name: "bad nsid", frame: commitFrame(`{"rev":"3ke6kg3wlch22","operation":"delete","collection":"post","rkey":"k"}`), reason: ReasonBadNSID, timeUS: 1795975616983633},
		{name: "no rkey", frame: commitFrame(`{"rev":"3ke6kg3wlch22","operation":"delete","collection":"app.bsky.feed.post"}`), reason: ReasonMissingField, timeUS: 1795975616983633},
		{name: "bad rkey", frame: commitFrame(`{"rev":"3ke6kg3wlch22","operation":"delete","collection":"app.bsky.feed.post","rkey":".."}`), reason: ReasonBadRKey, timeUS: 1795975616983633},
		{name: "create without cid", frame: commitFrame(strings.Replace(postCommit(`{"$type":"app.bsky.feed.post"}`), testCID, ``, 1)), reason: ReasonMissingField, timeUS: 1795975616983633},
		{name: "bad cid", frame: commitFrame(strings.Replace(postCommit(`{"$type":"app.bsky.feed.post"}`), testCID, `not a cid`, 1)), reason: ReasonBadCID, timeUS: 1795975616983633},
		{name: "create without record", frame: commitFrame(`{"rev":"3ke6kg3wlch22","operation":"create","collection":"app.bsky.feed.post","rkey":"k","cid":"` + testCID + `"}`), reason: ReasonMissingField, timeUS: 1795975616983633},
		{name: "create with null record", frame: commitFrame(postCommit(`null`)), reason: ReasonMissingField, timeUS: 1795975616983633},
		{name: "record not an object", frame: commitFrame(postCommit(`"app.bsky.feed.post"`)), reason: ReasonBadRecord, timeUS: 1795975616983633},
		{name: "record without $type", frame: commitFrame(postCommit(`{"text":"x"}`)), reason: ReasonTypeMismatch, timeUS: 1795975616983633},
		{name: "record of another type", frame: commitFrame(postCommit(`{"$type":"app.bsky.feed.like"}`)), reason: ReasonTypeMismatch, timeUS: 1795975616983633},
		{name: "record $type not a string", frame: commitFrame(postCommit(`{"$type":["app.bsky.feed.post"]}`)), reason: ReasonTypeMismatch, timeUS: 1795975616983633},
		{name: "follow without subject", frame: strings.Replace(followFrame, `"subject":"did:plc:ozpsb6zlp2oxm6gm4ekdkga3"`, `"x":1`, 1), reason: ReasonBadSubject, timeUS: 1795975616983633},
		{name: "follow subject a handle", frame: strings.Replace(followFrame, `"did:plc:ozpsb6zlp2oxm6gm4ekdkga3"`, `"bob.example.com"`, 1), reason: ReasonBadSubject, timeUS: 1795975616983633},
		{name: "follow subject an object", frame: strings.Replace(followFrame, `"did:plc:ozpsb6zlp2oxm6gm4ekdkga3"`, `{"did":"did:plc:ozpsb6zlp2oxm6gm4ekdkga3"}`, 1), reason: ReasonBadSubject, timeUS: 1795975616983633},
		{name: "record too large", frame: commitFrame(postCommit(`{"$type":"app.bsky.feed.post","text":"` + strings.Repeat("a", 200) + `"}`)), reason: ReasonRecordTooLarge, timeUS: 1795975616983633,
			decoder: NewDecoder(DecoderConfig{MaxRecordBytes: 100})},
		{name: "record too deep", frame: commitFrame(postCommit(`{"$type":"app.bsky.feed.post","x":` + deep + `}`)), reason: ReasonTooDeep, timeUS: 1795975616983633},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dec := tt.decoder
			if dec == nil {
				dec = testDecoder()
			}
			ev, err := dec.Decode([]byte(tt.frame))
			var derr *DropError
			if !errors.As(err, &derr) {
				t.Fatalf("err = %v, want a *DropError", err)
			}
			if derr.Reason != tt.reason {
				t.Fatalf("reason = %q (%v), want %q", derr.Reason, derr.Err, tt.reason)
			}
			if ev.Kind != KindSkipped || ev.Commit != nil || ev.Identity != nil || ev.Account != nil {
				t.Fatalf("dropped event has a payload: %+v", ev)
			}
			if ev.TimeUS != tt.timeUS || ev.Seq != 0 {
				t.Fatalf("skipped position = (%d, %d), want (%d, 0)", ev.TimeUS, ev.Seq, tt.timeUS)
			}
		})
	}
}

// A frame stamped past the local clock (beyond the allowed skew), or with a
// sequence number a server would read as a time, carries no position,
// whatever else is wrong with it: taken as the cursor, it would freeze the
// stored cursor in the future and resume at the live tip after a restart.
func TestDecodeFuturePositionIsDropped(t *testing.T) {
	now := time.UnixMicro(1795975616991124) // postFrame's time_us
	dec := NewDecoder(DecoderConfig{Now: func() time.Time { return now }, MaxClockSkew: time.Minute})
	limit := now.Add(time.Minute).UnixMicro()
	stamped := func(timeUS int64) string {
		return strings.Replace(postFrame, "1795975616991124", strconv.FormatInt(timeUS, 10), 1)
	}
	big := stamped(limit + 1)
	tests := []struct {
		name, frame, reason string
	}{
		{"valid event", stamped(limit + 1), ReasonTimeInFuture},
		{"far future", stamped(9_000_000_000_000_000_000), ReasonTimeInFuture},
		{"wrong field type", `{"time_us":9000000000000000000,"kind":5}`, ReasonTimeInFuture},
		{"syntax error", `{"did":"did:plc:a","time_us":9000000000000000000,"cursor":3,"kind":`, ReasonTimeInFuture},
		{"truncated", big[:len(big)-40], ReasonTimeInFuture},
		{"bad did", `{"did":"x","time_us":9000000000000000000,"kind":"account","account":{}}`, ReasonTimeInFuture},
		{"cursor read as a time", strings.Replace(postFrame, `"kind"`, `"cursor":1000000000000000,"kind"`, 1), ReasonBadCursor},
		{"cursor far out", strings.Replace(postFrame, `"kind"`, `"cursor":9000000000000000000,"kind"`, 1), ReasonBadCursor},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := dec.Decode([]byte(tt.frame))
			var derr *DropError
			if !errors.As(err, &derr) || derr.Reason != tt.reason {
				t.Fatalf("err = %v, want a drop for %s", err, tt.reason)
			}
			if ev.Kind != KindSkipped || ev.TimeUS != 0 || ev.Seq != 0 || ev.Commit != nil {
				t.Fatalf("dropped event %+v carries a position or payload", ev)
			}
		})
	}
	if ev, err := dec.Decode([]byte(stamped(limit))); err != nil || ev.TimeUS != limit {
		t.Fatalf("frame at the skew limit: %+v, %v", ev, err)
	}
	if ev, err := dec.Decode([]byte(strings.Replace(postFrame, `"kind"`, `"cursor":999999999999999,"kind"`, 1))); err != nil || ev.Seq != 999999999999999 {
		t.Fatalf("largest sequence number: %+v, %v", ev, err)
	}
}

// A drop's error is logged, so it stays short however long the string from
// the frame that it names.
func TestDropErrorsAreShort(t *testing.T) {
	huge := strings.Repeat("é", 512<<10) // 1 MiB
	digits := strings.Repeat("9", 1<<20)
	tests := []struct{ name, frame, reason string }{
		{"kind", `{"did":"did:plc:a","time_us":9,"kind":"` + huge + `"}`, ReasonBadKind},
		{"operation", commitFrame(strings.Replace(postCommit(`{}`), `"create"`, `"`+huge+`"`, 1)), ReasonBadOperation},
		{"record $type", commitFrame(postCommit(`{"$type":"` + huge + `"}`)), ReasonTypeMismatch},
		{"number literal", `{"did":"did:plc:a","time_us":9,"cursor":` + digits + `,"kind":"account","account":{}}`, ReasonBadJSON},
	}
	dec := NewDecoder(DecoderConfig{MaxRecordBytes: 2 << 20, Now: func() time.Time { return testNow }})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := dec.Decode([]byte(tt.frame))
			var derr *DropError
			if !errors.As(err, &derr) || derr.Reason != tt.reason {
				t.Fatalf("err = %.200v, want a drop for %s", err, tt.reason)
			}
			if msg := derr.Error(); len(msg) > 400 || !utf8.ValidString(msg) {
				t.Fatalf("error is %d bytes: %.200s", len(msg), msg)
			}
		})
	}
}

// A depth of exactly MaxDepth is allowed; brackets inside strings do not count.
func TestDecodeDepthBoundary(t *testing.T) {
	dec := NewDecoder(DecoderConfig{MaxDepth: 3})
	ok := `{"$type":"app.bsky.feed.post","a":{"b":[1]},"s":"[[[[{{{{\"["}`
	if _, err := dec.Decode([]byte(commitFrame(postCommit(ok)))); err != nil {
		t.Fatalf("depth 3: %v", err)
	}
	tooDeep := `{"$type":"app.bsky.feed.post","a":{"b":[[1]]}}`
	if _, err := dec.Decode([]byte(commitFrame(postCommit(tooDeep)))); err == nil {
		t.Fatal("depth 4 accepted")
	}
}

func TestSalvagePosition(t *testing.T) {
	tests := []struct {
		name   string
		prefix string
		timeUS int64
		seq    int64
		did    syntax.DID
	}{
		{"leading keys", followFrame[:120], 1795975616983633, 0, "did:plc:arbdlauvzwscggnm7kimjnwa"},
		{"cut inside a number", `{"did":"did:plc:a","time_us":17959`, 0, 0, "did:plc:a"},
		{"nested keys are not the frame's", `{"did":"did:plc:a","commit":{"time_us":5,"cursor":6,"record":{"x":[`, 0, 0, "did:plc:a"},
		{"keys after a nested object", `{"commit":{"time_us":5},"time_us":8,"cursor":2,"x":"`, 8, 0, ""},
		{"not an object", `[{"time_us":5}]`, 0, 0, ""},
		{"empty", ``, 0, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := salvagePosition([]byte(tt.prefix))
			if ev.Kind != KindSkipped || ev.TimeUS != tt.timeUS || ev.Seq != tt.seq || ev.DID != tt.did {
				t.Fatalf("got %+v", ev)
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	frames := map[string]string{
		"post":   typicalPostFrame,
		"reply":  replyPostFrame,
		"follow": followFrame,
		"delete": deleteFrame,
	}
	for name, frame := range frames {
		b.Run(name, func(b *testing.B) {
			dec := testDecoder()
			buf := []byte(frame)
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := dec.Decode(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// typicalPostFrame is a post of about 500 bytes, the size of an average
// firehose event.
const typicalPostFrame = `{"did":"did:plc:kdmhsqjgb4mmrul5nxbat2xs","time_us":1795975616991124,"cursor":918273,"kind":"commit","commit":{"rev":"3ke6kg3wlch22","operation":"create","collection":"app.bsky.feed.post","rkey":"3kbbpidw2r7zx","record":{"$type":"app.bsky.feed.post","createdAt":"2024-10-02T21:28:22.123Z","langs":["en"],"text":"took the long way home tonight and the lake was glowing. some days the city is kind to you \"like this\" and you just have to stop and look for a while"},"cid":"bafyreigwuiotmkaytriom4alrxkamtlzsf35xljotttx6oy3hd63xuxyyq"}}`

// replyPostFrame is a reply of about 800 bytes.
const replyPostFrame = `{"did":"did:plc:kdmhsqjgb4mmrul5nxbat2xs","time_us":1795975616991124,"cursor":918273,"kind":"commit","commit":{"rev":"3ke6kg3wlch22","operation":"create","collection":"app.bsky.feed.post","rkey":"3kbbpidw2r7zx","record":{"$type":"app.bsky.feed.post","createdAt":"2024-10-02T21:28:22.123Z","langs":["en"],"reply":{"parent":{"cid":"bafyreigwuiotmkaytriom4alrxkamtlzsf35xljotttx6oy3hd63xuxyyq","uri":"at://did:plc:ozpsb6zlp2oxm6gm4ekdkga3/app.bsky.feed.post/3kbbpidw2r7zw"},"root":{"cid":"bafyreigwuiotmkaytriom4alrxkamtlzsf35xljotttx6oy3hd63xuxyyq","uri":"at://did:plc:ozpsb6zlp2oxm6gm4ekdkga3/app.bsky.feed.post/3kbbpidw2r7zw"}},"text":"that is a lovely photo, where was it taken? \"the lake\" I guess"},"cid":"bafyreigwuiotmkaytriom4alrxkamtlzsf35xljotttx6oy3hd63xuxyyq"}}`
