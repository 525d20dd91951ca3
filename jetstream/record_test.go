package jetstream

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

var recordSeeds = []string{
	`{}`,
	` { "$type" : "app.bsky.feed.post" , "createdAt" : "2024-10-02T21:28:22Z" } `,
	`{"$type":"app.bsky.graph.follow","subject":"did:plc:ozpsb6zlp2oxm6gm4ekdkga3","createdAt":"2024-10-02T08:19:35Z"}`,
	`{"subject":{"uri":"at://x","cid":"y"},"$type":"app.bsky.feed.repost"}`,
	`{"a":{"$type":"inner","subject":"no"},"b":["$type",":",","],"$type":"outer"}`,
	`{"$type":"first","$type":"last"}`,
	`{"\u0024type":"escaped key","text":"a \"quoted\" , : { [ string"}`,
	`{"$type":"a\"b\\c\u00e9","createdAt":12,"subject":null}`,
	`{"$TYPE":"wrong case","Subject":"x"}`,
	`{"$type":true,"subject":["did:plc:x"]}`,
	`[{"$type":"x"}]`,
	`"str"`,
	`12`,
}

// scanRecordHead must read the same top-level strings as a full decode
// (with exact key matching and the last duplicate winning).
func TestScanRecordHeadMatchesDecode(t *testing.T) {
	for _, s := range recordSeeds {
		checkRecordHead(t, []byte(s))
	}
}

func FuzzScanRecordHead(f *testing.F) {
	for _, s := range recordSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, rec []byte) {
		if !json.Valid(rec) || !utf8.Valid(rec) {
			return // the frame decode only ever hands over valid UTF-8 JSON
		}
		checkRecordHead(t, rec)
	})
}

func checkRecordHead(t *testing.T, rec []byte) {
	t.Helper()
	got, derr := scanRecordHead(rec, 10000)
	var top map[string]json.RawMessage
	if err := json.Unmarshal(rec, &top); err != nil || top == nil {
		if derr == nil || derr.Reason != ReasonBadRecord {
			t.Fatalf("%s: not an object, got %+v, %v", rec, got, derr)
		}
		return
	}
	if derr != nil {
		t.Fatalf("%s: %v", rec, derr)
	}
	for key, field := range map[string]looseString{"$type": got.Type, "subject": got.Subject, "createdAt": got.CreatedAt} {
		var want string
		raw, present := top[key]
		isString := present && json.Unmarshal(raw, &want) == nil && strings.HasPrefix(strings.TrimSpace(string(raw)), `"`)
		if field.ok != isString || field.s != want && isString {
			t.Errorf("%s: %s = %+v, want %q (string %v)", rec, key, field, want, isString)
		}
	}
}

func TestScanRecordHeadDepth(t *testing.T) {
	rec := []byte(`{"a":{"b":[1]},"s":"[[[[{{{{\"["}`)
	if _, derr := scanRecordHead(rec, 3); derr != nil {
		t.Fatalf("depth 3: %v", derr)
	}
	if _, derr := scanRecordHead(rec, 2); derr == nil || derr.Reason != ReasonTooDeep {
		t.Fatalf("depth 3 with limit 2: %v", derr)
	}
}
