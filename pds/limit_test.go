package pds_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/atfeeds/appview/jetstream"
	"github.com/atfeeds/appview/pds"
	"github.com/atfeeds/appview/pds/pdstest"
)

// TestMaxRecordBytesMatchesJetstream pins pds.MaxRecordBytes to the
// Jetstream decoder's default cap: a record must not be storable from a
// PDS listing when the stream would have dropped it, or the other way.
func TestMaxRecordBytesMatchesJetstream(t *testing.T) {
	dec := jetstream.NewDecoder(jetstream.DecoderConfig{})
	frame := func(size int) []byte {
		head, tail := `{"$type":"app.bsky.feed.post","text":"`, `"}`
		record := head + strings.Repeat("a", size-len(head)-len(tail)) + tail
		return []byte(`{"did":"did:plc:alice234567abcdefghijklm","time_us":1795975616983633,"kind":"commit",` +
			`"commit":{"rev":"3ke6kg3wlch22","operation":"create","collection":"app.bsky.feed.post",` +
			`"rkey":"3kbbpidw2r7zx","cid":"` + pdstest.FakeCID([]byte(record)) + `","record":` + record + `}}`)
	}
	if _, err := dec.Decode(frame(pds.MaxRecordBytes)); err != nil {
		t.Fatalf("stream drops a record of pds.MaxRecordBytes: %v", err)
	}
	_, err := dec.Decode(frame(pds.MaxRecordBytes + 1))
	var derr *jetstream.DropError
	if !errors.As(err, &derr) || derr.Reason != jetstream.ReasonRecordTooLarge {
		t.Fatalf("stream keeps a record of pds.MaxRecordBytes+1: %v", err)
	}
}

// TestMaxRecordDepthMatchesJetstream pins pds.MaxRecordDepth to the
// Jetstream decoder's default: a record nested one level too deep is
// dropped by the stream and refused in a listing, and one at the limit is
// kept by both.
func TestMaxRecordDepthMatchesJetstream(t *testing.T) {
	const repo, coll, rkey = "did:plc:alice234567abcdefghijklm", "app.bsky.feed.post", "3kbbpidw2r7zx"
	dec := jetstream.NewDecoder(jetstream.DecoderConfig{})
	for _, depth := range []int{pds.MaxRecordDepth, pds.MaxRecordDepth + 1} {
		// The record object is depth 1; each array inside adds one. A
		// string holding brackets adds nothing.
		inner := strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1)
		record := `{"$type":"` + coll + `","text":"[[[[{{{{\"","x":` + inner + `}`
		cid := pdstest.FakeCID([]byte(record))
		_, serr := dec.Decode([]byte(`{"did":"` + repo + `","time_us":1795975616983633,"kind":"commit",` +
			`"commit":{"rev":"3ke6kg3wlch22","operation":"create","collection":"` + coll + `",` +
			`"rkey":"` + rkey + `","cid":"` + cid + `","record":` + record + `}}`))
		page, err := pds.DecodePageForTest([]byte(`{"records":[{"uri":"at://`+repo+`/`+coll+`/`+rkey+`","cid":"`+cid+`","value":`+record+`}]}`), repo, coll)
		if err != nil {
			t.Fatal(err)
		}
		streamKeeps, listingKeeps := serr == nil, len(page.Records) == 1
		if streamKeeps != listingKeeps || streamKeeps != (depth <= pds.MaxRecordDepth) {
			t.Errorf("depth %d: stream keeps %v (%v), listing keeps %v", depth, streamKeeps, serr, listingKeeps)
		}
	}
}
