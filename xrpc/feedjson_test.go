package xrpc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
)

// encodingJSON is what writeJSON produced for a page before it was written
// by hand: the reference appendFeedResponse must match byte for byte.
func encodingJSON(t testing.TB, resp *feedResponse) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(resp); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestAppendFeedResponseMatchesEncodingJSON(t *testing.T) {
	rec := feedRecord{
		URI: "at://did:plc:abc/app.bsky.feed.post/3k", CID: "bafyrei", DID: "did:plc:abc",
		Collection: "app.bsky.feed.post", RKey: "3k", TimeUS: 1767225600000000,
		Value: json.RawMessage(`{"$type":"app.bsky.feed.post","text":"<b>&amp; \u2028 ünï","langs":["en"]}`),
	}
	odd := rec
	odd.RKey = "a\"b\\c\n\x01é\u2028<&>\xff"
	for name, resp := range map[string]*feedResponse{
		"empty":          {Records: []feedRecord{}},
		"one":            {Records: []feedRecord{rec}},
		"cursor":         {Records: []feedRecord{rec, rec}, Cursor: "MTc2NzIyNTYwMDAwMDAwMDo0Mg.abc"},
		"escaped fields": {Records: []feedRecord{odd}, Cursor: "x\"y"},
		"negative time":  {Records: []feedRecord{{Value: json.RawMessage(`{}`), TimeUS: -5}}},
		"no profiles":    {Records: []feedRecord{rec}, Profiles: &[]profileView{}},
		"profiles": {Records: []feedRecord{rec}, Cursor: "c", Profiles: &[]profileView{
			{DID: "did:plc:abc", Handle: "alice.test", DisplayName: "Al <&> \u2028"}, {DID: "did:plc:def"}}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := appendFeedResponse(nil, resp)
			if err != nil {
				t.Fatal(err)
			}
			want := encodingJSON(t, resp)
			if !bytes.Equal(got, want) {
				t.Fatalf("got  %s\nwant %s", got, want)
			}
		})
	}
}

// FuzzAppendFeedResponse checks the hand-written encoder against
// encoding/json on arbitrary field strings and (valid, compact) bodies.
func FuzzAppendFeedResponse(f *testing.F) {
	f.Add("at://did:plc:a/app.bsky.feed.post/3k", "did:plc:a", "3k", `{"text":"hi"}`, "cur", int64(1))
	f.Add("\u2028", "\"", "\\", `[1,2,{"a":null}]`, "", int64(-1))
	f.Fuzz(func(t *testing.T, uri, did, rkey, body, cursor string, timeUS int64) {
		var compact bytes.Buffer
		if json.Compact(&compact, []byte(body)) != nil {
			return // getFeed never writes a body that is not valid JSON
		}
		resp := &feedResponse{Records: []feedRecord{{
			URI: uri, CID: rkey, DID: did, Collection: uri, RKey: rkey, TimeUS: timeUS,
			Value: json.RawMessage(compact.Bytes()),
		}}, Cursor: cursor}
		got, err := appendFeedResponse(nil, resp)
		if err != nil {
			t.Fatal(err)
		}
		want := encodingJSON(t, resp)
		if !bytes.Equal(got, want) {
			t.Fatalf("got  %s\nwant %s", got, want)
		}
	})
}

// BenchmarkAppendJSONString appends a record URI, the longest of the
// identifiers a page writes five of per record:
//
//	go test ./xrpc -run '^$' -bench AppendJSONString -count 3
func BenchmarkAppendJSONString(b *testing.B) {
	const uri = "at://did:plc:abcdefghijklmnopqrstuvwx/app.bsky.feed.post/3lbbbbbbbbbb2"
	buf := make([]byte, 0, 2*len(uri))
	for b.Loop() {
		buf = appendJSONString(buf[:0], uri)
	}
	if string(buf) != `"`+uri+`"` {
		b.Fatalf("appended %s", buf)
	}
}

// BenchmarkAppendFeedResponse writes a full page: 50 records with
// realistic identifiers and bodies, and a cursor.
//
//	go test ./xrpc -run '^$' -bench AppendFeedResponse -benchmem
func BenchmarkAppendFeedResponse(b *testing.B) {
	resp := &feedResponse{Cursor: "MTc2NzIyNTYwMDAwMDAwMDo0Mg.abcdefghijklmnop"}
	for i := range 50 {
		did := fmt.Sprintf("did:plc:%024d", i*7919)
		rkey := fmt.Sprintf("3l%011d", i*104729)
		resp.Records = append(resp.Records, feedRecord{
			URI: "at://" + did + "/app.bsky.feed.post/" + rkey, CID: "bafyreigwuiotmkaytriom4alrxkamtlzsf35xljotttx6oy3hd63xuxyyq",
			DID: did, Collection: "app.bsky.feed.post", RKey: rkey, TimeUS: 1767225600000000 + int64(i),
			Value: json.RawMessage(fmt.Sprintf(`{"$type":"app.bsky.feed.post","createdAt":"2026-01-01T00:00:00.000Z","langs":["en"],"text":"post %d: took the long way home tonight and the lake was glowing, some days the city is kind to you"}`, i)),
		})
	}
	buf := make([]byte, 0, 64<<10)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = appendFeedResponse(buf[:0], resp); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
}
