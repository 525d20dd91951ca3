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
}

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
func ParseProfile(raw json.RawMessage) (f ProfileFields, ok bool) {
	var rec struct {
		Type        string          `json:"$type"`
		DisplayName json.RawMessage `json:"displayName"`
		Description json.RawMessage `json:"description"`
		Avatar      json.RawMessage `json:"avatar"`
	}
	if json.Unmarshal(raw, &rec) != nil || rec.Type != string(ProfileCollection) {
		return ProfileFields{}, false
	}
	f.DisplayName = boundedString(rec.DisplayName, MaxDisplayNameBytes)
	f.Description = boundedString(rec.Description, MaxDescriptionBytes)
	f.Avatar = parseBlob(rec.Avatar)
	return f, true
}

// boundedString is the JSON string in raw, or "" when raw is not a string,
// is too long or is not valid UTF-8.
func boundedString(raw json.RawMessage, maxBytes int) string {
	var s string
	if len(raw) == 0 || json.Unmarshal(raw, &s) != nil || len(s) > maxBytes || !utf8.ValidString(s) {
		return ""
	}
	return s
}

// parseBlob reads a blob reference: {"$type":"blob","ref":{"$link":cid},
// "mimeType":…,"size":…}, or the legacy {"cid":…,"mimeType":…} without a
// size.
func parseBlob(raw json.RawMessage) *Blob {
	if len(raw) == 0 {
		return nil
	}
	var b struct {
		Type string `json:"$type"`
		Ref  struct {
			Link string `json:"$link"`
		} `json:"ref"`
		CID      string `json:"cid"`
		MimeType string `json:"mimeType"`
		Size     int64  `json:"size"`
	}
	if json.Unmarshal(raw, &b) != nil {
		return nil
	}
	cid := b.Ref.Link
	if b.Type != "blob" {
		cid = b.CID // the legacy form
	}
	if _, err := syntax.ParseCID(cid); err != nil {
		return nil
	}
	if b.MimeType == "" || len(b.MimeType) > maxMimeTypeBytes || !utf8.ValidString(b.MimeType) || b.Size < 0 {
		return nil
	}
	return &Blob{CID: cid, MimeType: b.MimeType, Size: b.Size}
}
