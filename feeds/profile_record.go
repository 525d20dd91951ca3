package feeds

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// ProfileCollection is the collection of profile records; an account's
// profile is its record with key ProfileRKey.
const (
	ProfileCollection syntax.NSID      = "app.bsky.actor.profile"
	ProfileRKey       syntax.RecordKey = "self"
)

// The bounds of the stored profile fields: the Lexicon's maxLength of
// displayName and description, and sane caps on the avatar reference.
const (
	MaxDisplayNameBytes = 640
	MaxDescriptionBytes = 2560
	maxMimeTypeBytes    = 128
)

// ProfileFields are the parts of a profile record the appview keeps.
// Everything else in the record (banner, pinned post, labels…) is dropped.
type ProfileFields struct {
	DisplayName string
	Description string
	// Avatar is nil when the record has none, or one the appview cannot use.
	Avatar *Blob
	// Dropped tells which fields the record had that were left out (of
	// the wrong type, over their bound, not UTF-8, an unusable avatar).
	Dropped ProfileDrops
}

// ProfileDrops is a set of profile fields a record had but the appview
// could not keep; appview_profile_fields_dropped_total{field} counts them.
type ProfileDrops uint8

const (
	DroppedDisplayName ProfileDrops = 1 << iota
	DroppedDescription
	DroppedAvatar
)

// profileDropNames are the fields of a ProfileDrops, as metric labels.
var profileDropNames = []struct {
	drop  ProfileDrops
	label string
}{{DroppedDisplayName, "displayName"}, {DroppedDescription, "description"}, {DroppedAvatar, "avatar"}}

// Blob is a reference to a blob on the author's PDS.
type Blob struct {
	CID      string
	MimeType string
	Size     int64
}

// ParseProfile reads the kept fields of a profile record. It is lenient
// field by field: a field of the wrong type, or longer than its bound, is
// left out rather than failing the record, so one bad field does not hide
// the rest. ok is false only when raw is not a JSON object of $type
// app.bsky.actor.profile.
//
// Keys match exactly, as atproto's do: the record is read into maps, not
// structs, whose encoding/json matching ignores case (and folds "ſ" to
// "s"), so "DisplayName" beside "displayName" chose the name shown here
// while Bluesky showed the other (found by a review).
func ParseProfile(raw json.RawMessage) (f ProfileFields, ok bool) {
	rec, ok := jsonObject(raw)
	if !ok {
		return ProfileFields{}, false
	}
	var typ string
	if json.Unmarshal(rec["$type"], &typ) != nil || typ != string(ProfileCollection) {
		return ProfileFields{}, false
	}
	var ok1, ok2 bool
	f.DisplayName, ok1 = boundedString(rec["displayName"], MaxDisplayNameBytes)
	f.Description, ok2 = boundedString(rec["description"], MaxDescriptionBytes)
	f.Avatar = parseBlob(rec["avatar"])
	if !ok1 {
		f.Dropped |= DroppedDisplayName
	}
	if !ok2 {
		f.Dropped |= DroppedDescription
	}
	if _, had := rec["avatar"]; had && f.Avatar == nil {
		f.Dropped |= DroppedAvatar
	}
	return f, true
}

// jsonObject reads a JSON object's members by their exact keys (the last
// of a repeated key, as encoding/json has it).
func jsonObject(raw json.RawMessage) (map[string]json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &m) != nil || m == nil {
		return nil, false
	}
	return m, true
}

// jsonStringMember is the string value of key in m, or "".
func jsonStringMember(m map[string]json.RawMessage, key string) string {
	var s string
	if v, ok := m[key]; !ok || json.Unmarshal(v, &s) != nil {
		return ""
	}
	return s
}

// boundedString is the JSON string in raw, or "" when raw is absent (ok),
// or is not a string, is too long or is not valid UTF-8 (not ok).
func boundedString(raw json.RawMessage, maxBytes int) (s string, ok bool) {
	if len(raw) == 0 {
		return "", true
	}
	if json.Unmarshal(raw, &s) != nil || len(s) > maxBytes || !utf8.ValidString(s) {
		return "", false
	}
	return s, true
}

// parseBlob reads a blob reference: {"$type":"blob","ref":{"$link":cid},
// "mimeType":…,"size":…}, or the legacy {"cid":…,"mimeType":…} without a
// size.
func parseBlob(raw json.RawMessage) *Blob {
	b, ok := jsonObject(raw)
	if !ok {
		return nil
	}
	var cid string
	if jsonStringMember(b, "$type") == "blob" {
		ref, ok := jsonObject(b["ref"])
		if !ok {
			return nil
		}
		cid = jsonStringMember(ref, "$link")
	} else {
		cid = jsonStringMember(b, "cid") // the legacy form
	}
	if _, err := syntax.ParseCID(cid); err != nil {
		return nil
	}
	var size int64
	if v, ok := b["size"]; ok && json.Unmarshal(v, &size) != nil {
		return nil
	}
	mime := jsonStringMember(b, "mimeType")
	if mime == "" || len(mime) > maxMimeTypeBytes || !utf8.ValidString(mime) || size < 0 {
		return nil
	}
	return &Blob{CID: cid, MimeType: mime, Size: size}
}
