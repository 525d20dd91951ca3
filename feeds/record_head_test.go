package feeds

import (
	"encoding/json"
	"testing"
)

func TestParseRecordHead(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		want      RecordHead
		ok        bool
	}{
		{"follow", `{"subject":"did:plc:dave","createdAt":"2026-01-01T00:00:00Z"}`, RecordHead{"did:plc:dave", 1767225600000000}, true},
		{"keys match exactly", `{"Subject":"did:plc:dave","CREATEDAT":"2026-01-01T00:00:00Z"}`, RecordHead{}, true},
		{"the last repeated key wins", `{"subject":"did:plc:a","subject":"did:plc:b"}`, RecordHead{Subject: "did:plc:b"}, true},
		{"exact key beside another spelling", `{"subject":"did:plc:a","Subject":"did:plc:b"}`, RecordHead{Subject: "did:plc:a"}, true},
		{"subject not a string", `{"subject":{"uri":"at://x"}}`, RecordHead{}, true},
		{"createdAt not a string", `{"createdAt":1700000000}`, RecordHead{}, true},
		{"before the epoch sinks", `{"createdAt":"1969-07-20T20:17:40Z"}`, RecordHead{CreatedAtUS: 1}, true},
		{"at the epoch", `{"createdAt":"1970-01-01T00:00:00Z"}`, RecordHead{CreatedAtUS: 1}, true},
		{"not a datetime", `{"createdAt":"yesterday"}`, RecordHead{}, true},
		{"not an object", `["subject"]`, RecordHead{}, false},
		{"null", `null`, RecordHead{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParseRecordHead(json.RawMessage(tc.raw))
			if got != tc.want || ok != tc.ok {
				t.Fatalf("got %+v %v, want %+v %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
