package xrpc

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"

	"github.com/atfeeds/appview/feeds"
	"github.com/bluesky-social/indigo/atproto/syntax"
)

// A cursor is opaque to clients. Inside it is
//
//	version (1 byte) | SortUS (8 bytes, big endian) | RecordID (8 bytes, big endian) | check (8 bytes)
//
// in unpadded URL-safe base64, where check is the first 8 bytes of a
// SHA-256 over the cursor's scope (feed, actor, collection and, on a
// filtered read, the filters) and the first 17 bytes. The check is not a secret: it only makes a cursor from another
// feed, actor or collection, or a mangled one, fail loudly instead of
// quietly paging through the wrong feed. Forging a cursor gains nothing, as
// it only positions a read of the caller's chosen feed.
//
// Fixed-width fields make the encoding canonical: every (SortUS, RecordID)
// has exactly one cursor and every accepted cursor decodes to one key.

const (
	cursorVersion    = 1
	cursorPayloadLen = 1 + 8 + 8
	cursorCheckLen   = 8
	cursorRawLen     = cursorPayloadLen + cursorCheckLen
	// maxCursorLen bounds what we are willing to look at at all.
	maxCursorLen = 2048
)

var cursorEncoding = base64.RawURLEncoding.Strict()

// errInvalidCursor is the only thing a client learns about a bad cursor.
var errInvalidCursor = errors.New("invalid cursor")

// cursorScope is what a cursor is bound to.
type cursorScope struct {
	Feed       string
	Actor      syntax.DID
	Collection syntax.NSID
	// Filter is the canonical encoding of the page's filters (filters.go),
	// empty when unfiltered. It joins the check only when set, so
	// unfiltered cursors stay what they were before filters existed.
	Filter string
}

func (sc cursorScope) check(payload []byte) []byte {
	h := sha256.New()
	// Length-prefix every field so that no two scopes hash the same input.
	var buf []byte
	buf = append(buf, "atfeeds-appview-cursor\x00"...)
	fields := []string{sc.Feed, string(sc.Actor), string(sc.Collection)}
	if sc.Filter != "" {
		fields = append(fields, sc.Filter)
	}
	for _, f := range fields {
		buf = appendField(buf, f)
	}
	h.Write(buf)
	h.Write(payload)
	return h.Sum(nil)[:cursorCheckLen]
}

// encodeCursor returns the cursor for the page that follows key in scope.
func encodeCursor(sc cursorScope, key feeds.PageKey) string {
	raw := make([]byte, 0, cursorRawLen)
	raw = append(raw, cursorVersion)
	raw = binary.BigEndian.AppendUint64(raw, uint64(key.SortUS))
	raw = binary.BigEndian.AppendUint64(raw, uint64(key.RecordID))
	raw = append(raw, sc.check(raw)...)
	return cursorEncoding.EncodeToString(raw)
}

// parseCursor checks what a cursor's shape alone can tell: its length,
// encoding and version. It needs no scope, so getFeed runs it before a
// handle actor's lookup: a mangled cursor is a 400 without a network call
// (and a 400 whatever the directory's state).
func parseCursor(s string) ([]byte, error) {
	if len(s) > maxCursorLen || len(s) != cursorEncoding.EncodedLen(cursorRawLen) {
		return nil, errInvalidCursor
	}
	raw, err := cursorEncoding.DecodeString(s)
	if err != nil || len(raw) != cursorRawLen || raw[0] != cursorVersion {
		return nil, errInvalidCursor
	}
	return raw, nil
}

// decodeCursor parses a cursor made by encodeCursor for the same scope.
func decodeCursor(sc cursorScope, s string) (feeds.PageKey, error) {
	raw, err := parseCursor(s)
	if err != nil {
		return feeds.PageKey{}, err
	}
	payload, check := raw[:cursorPayloadLen], raw[cursorPayloadLen:]
	if !bytes.Equal(check, sc.check(payload)) {
		return feeds.PageKey{}, errInvalidCursor
	}
	return feeds.PageKey{
		SortUS:   int64(binary.BigEndian.Uint64(payload[1:9])),
		RecordID: int64(binary.BigEndian.Uint64(payload[9:17])),
	}, nil
}
