package jetstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// FuzzDecode asserts invariants only: whatever the frame, Decode either
// returns a fully valid event or a DropError with a known reason and a
// skipped event, and never panics.
func FuzzDecode(f *testing.F) {
	seeds := []string{
		followFrame, postFrame, deleteFrame, identityFrame, accountFrame, typicalPostFrame, replyPostFrame,
		followFrame[:150], `{}`, `null`, `[]`, `{"did":"did:plc:a","time_us":1,"kind":"commit","commit":{}}`,
		`{"did":"did:plc:a","time_us":1,"kind":"commit","commit":{"rev":"3ke6kg3wlch22","operation":"create","collection":"a.b.c","rkey":"k","cid":"` + testCID + `","record":{"$type":"a.b.c","x":[[[[{}]]]]}}}`,
		`{"did":"did:plc:a","time_us":1e3,"kind":"identity","identity":{}}`,
		`{"DID":"did:plc:a","TIME_US":5,"Kind":"account","account":{"active":"yes"}}`,
		`{"did":"did:plc:a","time_us":1,"cursor":-5,"kind":"account","account":{}} trailing`,
		`{"time_us":9000000000000000000,"kind":5}`,
		`{"did":"did:plc:a","time_us":1,"cursor":1000000000000000,"kind":"account","account":{}}`,
		strings.Replace(postFrame, "hello", "\xed\xa0\x80", 1),
		strings.Replace(followFrame, `"subject":"did`, `"subject":"\u0064id`, 1),
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	dec := NewDecoder(DecoderConfig{
		FollowCollections: []syntax.NSID{followNSID},
		MaxRecordBytes:    1024,
		MaxDepth:          8,
	})
	f.Fuzz(func(t *testing.T, frame []byte) {
		orig := slices.Clone(frame)
		ev, err := dec.Decode(frame)
		if !bytes.Equal(frame, orig) {
			t.Fatal("Decode modified the frame")
		}
		if err != nil {
			var derr *DropError
			if !errors.As(err, &derr) {
				t.Fatalf("error %v is not a *DropError", err)
			}
			if !slices.Contains(dropReasons, derr.Reason) {
				t.Fatalf("unknown reason %q", derr.Reason)
			}
			if len(derr.Error()) > 400 {
				t.Fatalf("drop error of %d bytes", len(derr.Error()))
			}
			if ev.Kind != KindSkipped || ev.Commit != nil || ev.Identity != nil || ev.Account != nil {
				t.Fatalf("dropped frame gave a payload: %+v", ev)
			}
			if ev.TimeUS < 0 || ev.Seq < 0 || (ev.TimeUS == 0 && ev.Seq != 0) || !believable(dec, ev) {
				t.Fatalf("bad skipped position: %+v", ev)
			}
			return
		}
		checkValidEvent(t, dec, ev)
	})
}

// believable says whether ev's position could be stored as the cursor:
// not in the future, and a sequence number no server reads as a time.
func believable(dec *Decoder, ev Event) bool {
	return ev.TimeUS <= dec.now().Add(dec.maxClockSkew).UnixMicro() && ev.Seq < minTimeCursor
}

func checkValidEvent(t *testing.T, dec *Decoder, ev Event) {
	t.Helper()
	if _, err := syntax.ParseDID(string(ev.DID)); err != nil {
		t.Fatalf("invalid DID accepted: %q", ev.DID)
	}
	if ev.TimeUS <= 0 || ev.Seq < 0 || !believable(dec, ev) {
		t.Fatalf("bad position: %+v", ev)
	}
	payloads := 0
	for _, set := range []bool{ev.Commit != nil, ev.Identity != nil, ev.Account != nil} {
		if set {
			payloads++
		}
	}
	if payloads != 1 {
		t.Fatalf("event has %d payloads: %+v", payloads, ev)
	}
	switch ev.Kind {
	case KindIdentity:
		if h := ev.Identity.Handle; h != "" {
			if _, err := syntax.ParseHandle(h); err != nil {
				t.Fatalf("invalid handle accepted: %q", h)
			}
		}
	case KindAccount:
		if ev.Account == nil || len(ev.Account.Status) > maxStatusBytes || ev.Account.Time.After(time.Now().Add(DefaultMaxClockSkew)) {
			t.Fatalf("bad account accepted: %+v", ev.Account)
		}
	case KindCommit:
		c := ev.Commit
		if _, err := syntax.ParseNSID(string(c.Collection)); err != nil {
			t.Fatalf("invalid collection accepted: %q", c.Collection)
		}
		if _, err := syntax.ParseRecordKey(string(c.RKey)); err != nil {
			t.Fatalf("invalid rkey accepted: %q", c.RKey)
		}
		if _, err := syntax.ParseTID(c.Rev); err != nil {
			t.Fatalf("invalid rev accepted: %q", c.Rev)
		}
		switch c.Operation {
		case OpDelete:
			if c.Record != nil || c.CID != "" || c.Subject != "" {
				t.Fatalf("delete with data: %+v", c)
			}
		case OpCreate, OpUpdate:
			if _, err := syntax.ParseCID(c.CID); err != nil {
				t.Fatalf("invalid cid accepted: %q", c.CID)
			}
			if len(c.Record) > dec.maxRecordBytes || !json.Valid(c.Record) {
				t.Fatalf("bad record accepted: %q", c.Record)
			}
			var top map[string]json.RawMessage // exact keys, as atproto means them
			var typ string
			if err := json.Unmarshal(c.Record, &top); err != nil || json.Unmarshal(top["$type"], &typ) != nil || typ != string(c.Collection) {
				t.Fatalf("record $type %q in collection %q (%v)", typ, c.Collection, err)
			}
			if _, follow := dec.follows[c.Collection]; follow {
				if _, err := syntax.ParseDID(string(c.Subject)); err != nil {
					t.Fatalf("follow without a DID subject: %+v", c)
				}
			} else if c.Subject != "" {
				t.Fatalf("subject set outside a follow collection: %+v", c)
			}
		default:
			t.Fatalf("bad operation %d", c.Operation)
		}
	default:
		t.Fatalf("valid event of kind %v", ev.Kind)
	}
}
