package feeds

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// FuzzParseProfile feeds ParseProfile what a PDS or the stream may send as
// a profile record. It must not panic, keep only bounded UTF-8 strings
// read from their exact keys (and every such string the record has) and
// usable avatars, and what it keeps must
// read back the same from a record written with just those fields.
func FuzzParseProfile(f *testing.F) {
	for _, s := range []string{
		`{"$type":"app.bsky.actor.profile","displayName":"Alice","description":"hi","avatar":{"$type":"blob","ref":{"$link":"` + avatarCID + `"},"mimeType":"image/jpeg","size":1234}}`,
		`{"$type":"app.bsky.actor.profile","avatar":{"cid":"` + avatarCID + `","mimeType":"image/png"}}`,
		`{"$type":"app.bsky.actor.profile","displayName":7,"DisplayName":"Mallory","description":"\ud800"}`,
		`{"$type":"app.bsky.actor.profile","avatar":{"$type":"blob","ref":{"$link":"` + avatarCID + `"},"mimeType":"image/png","size":-1}}`,
		`{"$type":"app.bsky.feed.post"}`,
		`[]`, `null`, `{`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, ok := ParseProfile(raw)
		if !ok {
			if got != (ProfileFields{}) {
				t.Fatalf("a refused record gave fields %+v", got)
			}
			return
		}
		var rec map[string]json.RawMessage
		if err := json.Unmarshal(raw, &rec); err != nil {
			t.Fatalf("accepted a record that is not a JSON object: %v", err)
		}
		if typ := jsonStringMember(rec, "$type"); typ != string(ProfileCollection) {
			t.Fatalf("accepted a record of $type %q", typ)
		}
		for _, fld := range []struct {
			key     string
			val     string
			max     int
			dropped bool
		}{
			{"displayName", got.DisplayName, MaxDisplayNameBytes, got.Dropped&DroppedDisplayName != 0},
			{"description", got.Description, MaxDescriptionBytes, got.Dropped&DroppedDescription != 0},
		} {
			if len(fld.val) > fld.max || !utf8.ValidString(fld.val) {
				t.Fatalf("%s kept out of bounds or not UTF-8: %q", fld.key, fld.val)
			}
			if fld.dropped && fld.val != "" {
				t.Fatalf("%s dropped but kept as %q", fld.key, fld.val)
			}
			if fld.val != "" && jsonStringMember(rec, fld.key) != fld.val {
				t.Fatalf("%s = %q is not the record's member of that exact key", fld.key, fld.val)
			}
			// And a usable member is kept, not emptied (a review).
			var member string
			if v, had := rec[fld.key]; had && json.Unmarshal(v, &member) == nil && len(member) <= fld.max && utf8.ValidString(member) &&
				(fld.val != member || fld.dropped) {
				t.Fatalf("%s %q within bounds kept as %q (dropped %v)", fld.key, member, fld.val, fld.dropped)
			}
		}
		if a := got.Avatar; a != nil {
			if _, err := syntax.ParseCID(a.CID); err != nil {
				t.Fatalf("avatar kept with a bad CID %q", a.CID)
			}
			if a.MimeType == "" || len(a.MimeType) > maxMimeTypeBytes || !utf8.ValidString(a.MimeType) || a.Size < 0 {
				t.Fatalf("unusable avatar kept: %+v", *a)
			}
			if got.Dropped&DroppedAvatar != 0 {
				t.Fatalf("avatar both kept and dropped: %+v", *a)
			}
		}

		// What was kept reads back the same from a record of just that.
		again := map[string]any{"$type": ProfileCollection, "displayName": got.DisplayName, "description": got.Description}
		if a := got.Avatar; a != nil {
			again["avatar"] = map[string]any{"$type": "blob", "ref": map[string]string{"$link": a.CID}, "mimeType": a.MimeType, "size": a.Size}
		}
		b, err := json.Marshal(again)
		if err != nil {
			t.Fatal(err)
		}
		back, ok := ParseProfile(b)
		kept := got
		kept.Dropped = 0
		if !ok || back.DisplayName != kept.DisplayName || back.Description != kept.Description || back.Dropped != 0 ||
			(back.Avatar == nil) != (kept.Avatar == nil) || (back.Avatar != nil && *back.Avatar != *kept.Avatar) {
			t.Fatalf("kept fields %+v read back as %+v (ok %v) from %s", kept, back, ok, b)
		}
	})
}
