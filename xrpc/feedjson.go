package xrpc

import (
	"bytes"
	"encoding/json"
	"strconv"
	"sync"
)

// A getFeed page is written by hand rather than through encoding/json:
// the reflection walk and the second pass encoding/json makes over every
// record body (it re-validates and compacts a json.RawMessage) were a
// quarter of a page's cost. The output is byte for byte what
// writeJSON(feedResponse) produced, which the golden test pins.

// pageBuffers recycles response buffers between requests.
var pageBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 32<<10); return &b }}

// putPageBuffer returns a buffer to the pool unless one huge page grew it
// past what a typical page needs.
func putPageBuffer(b *[]byte) {
	if cap(*b) <= 1<<20 {
		pageBuffers.Put(b)
	}
}

// appendFeedResponse appends the JSON of a feedResponse, newline-terminated
// like json.Encoder. Bodies must be valid JSON; getFeed checks them. The
// profiles, when asked for, are few and go through encoding/json.
func appendFeedResponse(dst []byte, resp *feedResponse) ([]byte, error) {
	dst = append(dst, `{"records":[`...)
	for i := range resp.Records {
		r := &resp.Records[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"uri":`...)
		dst = appendJSONString(dst, r.URI)
		dst = append(dst, `,"cid":`...)
		dst = appendJSONString(dst, r.CID)
		dst = append(dst, `,"did":`...)
		dst = appendJSONString(dst, r.DID)
		dst = append(dst, `,"collection":`...)
		dst = appendJSONString(dst, r.Collection)
		dst = append(dst, `,"rkey":`...)
		dst = appendJSONString(dst, r.RKey)
		dst = append(dst, `,"time_us":`...)
		dst = strconv.AppendInt(dst, r.TimeUS, 10)
		dst = append(dst, `,"value":`...)
		dst = append(dst, r.Value...)
		dst = append(dst, '}')
	}
	dst = append(dst, ']')
	if resp.Cursor != "" {
		dst = append(dst, `,"cursor":`...)
		dst = appendJSONString(dst, resp.Cursor)
	}
	if resp.Profiles != nil {
		dst = append(dst, `,"profiles":`...)
		var err error
		if dst, err = appendEncoded(dst, *resp.Profiles); err != nil {
			return dst, err
		}
	}
	return append(dst, "}\n"...), nil
}

// appendEncoded appends v as encoding/json writes it for the API: HTML
// characters left alone, no trailing newline.
func appendEncoded(dst []byte, v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return dst, err
	}
	return append(dst, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...), nil
}

// plainJSON marks the bytes a JSON string holds as they are: printable
// ASCII but the quote and the backslash. A table lookup per byte is half
// the four comparisons it replaces, and the check runs over about 10 KB of
// identifiers a page.
var plainJSON = func() (t [256]bool) {
	for c := 0x20; c <= 0x7e; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// appendJSONString appends s as a JSON string. The fields of a feed record
// (DIDs, NSIDs, record keys, CIDs, at:// URIs, our cursors) are plain
// printable ASCII once parsed, so they are copied as they are; anything
// else goes through encoding/json, which escapes it the way the rest of
// the API does.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if !plainJSON[s[i]] {
			dst, _ = appendEncoded(dst, s) // a string always encodes
			return dst
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
