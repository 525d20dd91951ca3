package jetstream

import (
	"errors"
	"strings"
	"sync"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// Identifier checks on the hot path. indigo's syntax parsers use regular
// expressions, which cost about as much as the rest of a frame's decode;
// these give the same answers (a test checks them against syntax) in a
// fraction of the time.

// maxCachedNSIDs bounds the NSID cache. The firehose carries a few hundred
// collections at most; past the bound we just parse every time, so a
// stream of junk NSIDs cannot grow memory.
const maxCachedNSIDs = 4096

// nsidCache remembers collections that parsed, since the same few repeat
// on nearly every event.
type nsidCache struct {
	mu    sync.RWMutex
	valid map[string]syntax.NSID
}

func (c *nsidCache) parse(raw string) (syntax.NSID, error) {
	c.mu.RLock()
	n, ok := c.valid[raw]
	c.mu.RUnlock()
	if ok {
		return n, nil
	}
	n, err := syntax.ParseNSID(raw)
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	if c.valid == nil {
		c.valid = make(map[string]syntax.NSID)
	}
	if len(c.valid) < maxCachedNSIDs {
		c.valid[raw] = n
	}
	c.mu.Unlock()
	return n, nil
}

var (
	errRecordKey = errors.New("invalid record key syntax")
	errCID       = errors.New("invalid CID syntax")
	errTID       = errors.New("invalid TID syntax")
)

// parseRecordKey accepts what syntax.ParseRecordKey accepts: 1 to 512 of
// [a-zA-Z0-9_~.:-], but not "." or "..".
func parseRecordKey(raw string) (syntax.RecordKey, error) {
	if len(raw) == 0 || len(raw) > 512 || raw == "." || raw == ".." {
		return "", errRecordKey
	}
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if !isASCIIAlnum(c) && c != '_' && c != '~' && c != '.' && c != ':' && c != '-' {
			return "", errRecordKey
		}
	}
	return syntax.RecordKey(raw), nil
}

// parseCID accepts what syntax.ParseCID accepts: 8 to 256 of
// [a-zA-Z0-9+=], and no CIDv0 ("Qmb…").
func parseCID(raw string) (syntax.CID, error) {
	if len(raw) < 8 || len(raw) > 256 || strings.HasPrefix(raw, "Qmb") {
		return "", errCID
	}
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if !isASCIIAlnum(c) && c != '+' && c != '=' {
			return "", errCID
		}
	}
	return syntax.CID(raw), nil
}

// parseTID accepts what syntax.ParseTID accepts: 13 base32-sortable
// characters ([2-7a-z]), the first one of [2-7a-j] (the top bit is 0).
func parseTID(raw string) (syntax.TID, error) {
	if len(raw) != 13 || !isBase32Sort(raw[0]) || raw[0] > 'j' {
		return "", errTID
	}
	for i := 1; i < len(raw); i++ {
		if !isBase32Sort(raw[i]) {
			return "", errTID
		}
	}
	return syntax.TID(raw), nil
}

func isBase32Sort(c byte) bool {
	return (c >= '2' && c <= '7') || (c >= 'a' && c <= 'z')
}

func isASCIIAlnum(c byte) bool {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}
