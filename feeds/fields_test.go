package feeds

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestExtractFields(t *testing.T) {
	defs := func(kind FieldKind, path string) []fieldDef {
		return []fieldDef{{id: 1, path: splitFieldPath(path), kind: kind}}
	}
	long := strings.Repeat("x", MaxFieldValueBytes+1)
	many := make([]string, MaxFieldValues+5)
	for i := range many {
		many[i] = fmt.Sprintf("%q", fmt.Sprint("v", i))
	}
	for _, tc := range []struct {
		name string
		body string
		kind FieldKind
		path string
		want []any
	}{
		{"string", `{"lang":"en"}`, FieldEquality, "lang", []any{"en"}},
		{"array elements", `{"langs":["en","pt","en"]}`, FieldEquality, "langs", []any{"en", "pt"}},
		{"nested", `{"reply":{"root":{"uri":"at://x"}}}`, FieldEquality, "reply.root.uri", []any{"at://x"}},
		{"array mid-path", `{"facets":[{"t":"a"},{"t":"b"},{"u":"c"}]}`, FieldEquality, "facets.t", []any{"a", "b"}},
		{"nested arrays skipped", `{"a":[["x"],"y"]}`, FieldEquality, "a", []any{"y"}},
		{"integer and bool as text", `{"n":[7,true,1.5,null,{}]}`, FieldEquality, "n", []any{"7", "true"}},
		{"$type key", `{"$type":"app.bsky.feed.post"}`, FieldEquality, "$type", []any{"app.bsky.feed.post"}},
		{"too long skipped", `{"s":["` + long + `","ok"]}`, FieldEquality, "s", []any{"ok"}},
		{"empty skipped", `{"s":""}`, FieldEquality, "s", nil},
		{"bounded count", `{"s":[` + strings.Join(many, ",") + `]}`, FieldEquality, "s", firstValues(MaxFieldValues)},
		{"missing", `{"x":1}`, FieldEquality, "s", nil},
		{"not an object", `[1,2]`, FieldEquality, "s", nil},
		{"invalid JSON", `{"s":`, FieldEquality, "s", nil},
		{"datetime", `{"createdAt":"2024-01-02T03:04:05.000Z"}`, FieldDatetime, "createdAt", []any{int64(1704164645000000)}},
		{"datetime with offset", `{"createdAt":"2024-01-02T05:04:05+02:00"}`, FieldDatetime, "createdAt", []any{int64(1704164645000000)}},
		{"bad datetime", `{"createdAt":"yesterday"}`, FieldDatetime, "createdAt", nil},
		{"integer", `{"n":[3,-4,5.5,"6"]}`, FieldInteger, "n", []any{int64(3), int64(-4)}},
		{"integer overflow", `{"n":99999999999999999999}`, FieldInteger, "n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := extractFields([]byte(tc.body), defs(tc.kind, tc.path))[0]
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %#v, want %#v", got, tc.want)
			}
		})
	}
}

func firstValues(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = fmt.Sprint("v", i)
	}
	return out
}

func TestParseFieldValue(t *testing.T) {
	for _, tc := range []struct {
		kind FieldKind
		raw  string
		want any // nil: an error
	}{
		{FieldEquality, "en", "en"},
		{FieldEquality, "", nil},
		{FieldEquality, strings.Repeat("x", MaxFieldValueBytes+1), nil},
		{FieldEquality, "\xff", nil},
		{FieldDatetime, "2024-01-02T03:04:05Z", int64(1704164645000000)},
		{FieldDatetime, "2024-01-02", nil},
		{FieldDatetime, strings.Repeat("9", 65), nil},
		{FieldInteger, "-12", int64(-12)},
		{FieldInteger, "1e3", nil},
		{FieldInteger, "99999999999999999999", nil},
		{FieldKind("other"), "x", nil},
	} {
		got, err := ParseFieldValue(tc.kind, tc.raw)
		if tc.want == nil {
			if err == nil {
				t.Errorf("%s %q: got %v, want an error", tc.kind, tc.raw, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s %q: got %v, %v; want %v", tc.kind, tc.raw, got, err, tc.want)
		}
	}
}

func TestCheckFieldPath(t *testing.T) {
	for _, ok := range []string{"langs", "reply.root.uri", "$type", "a_b.c1"} {
		if err := CheckFieldPath(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".a", "a.", "a..b", "1a", "a-b", "a b", "a.b.c.d.e.f.g.h.i", strings.Repeat("a", 65)} {
		if err := CheckFieldPath(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// FuzzExtractFields feeds hostile record bodies to extraction and checks
// only its bounds: no more than MaxFieldValues values, none too long, each
// of the kind's type.
func FuzzExtractFields(f *testing.F) {
	for _, s := range []string{
		`{"langs":["en","pt"]}`, `{"a":{"b":[{"c":1},{"c":"x"}]}}`, `[[[[[]]]]]`,
		`{"createdAt":"2024-01-02T03:04:05Z","n":[1,2,3]}`, `{"a":` + strings.Repeat("[", 500),
	} {
		f.Add([]byte(s))
	}
	defs := []fieldDef{
		{id: 1, path: splitFieldPath("langs"), kind: FieldEquality},
		{id: 2, path: splitFieldPath("a.b.c"), kind: FieldEquality},
		{id: 3, path: splitFieldPath("createdAt"), kind: FieldDatetime},
		{id: 4, path: splitFieldPath("n"), kind: FieldInteger},
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for i, vals := range extractFields(body, defs) {
			if len(vals) > MaxFieldValues {
				t.Fatalf("field %d: %d values", i, len(vals))
			}
			for _, v := range vals {
				switch x := v.(type) {
				case string:
					if defs[i].kind != FieldEquality || x == "" || len(x) > MaxFieldValueBytes {
						t.Fatalf("field %d: bad value %q", i, x)
					}
				case int64:
					if !defs[i].kind.Range() {
						t.Fatalf("field %d: integer for %s", i, defs[i].kind)
					}
				default:
					t.Fatalf("field %d: value of type %T", i, v)
				}
			}
		}
	})
}

// FuzzParseFieldValue checks that a filter value either fails or parses to
// the type its kind stores.
func FuzzParseFieldValue(f *testing.F) {
	for _, s := range []string{"en", "2024-01-02T03:04:05Z", "-5", "", "\x00", "9223372036854775808"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		for _, kind := range []FieldKind{FieldEquality, FieldDatetime, FieldInteger} {
			v, err := ParseFieldValue(kind, raw)
			if err != nil {
				continue
			}
			switch x := v.(type) {
			case string:
				if kind != FieldEquality || x != raw {
					t.Fatalf("%s %q: %q", kind, raw, x)
				}
			case int64:
				if !kind.Range() {
					t.Fatalf("%s %q: %d", kind, raw, x)
				}
			default:
				t.Fatalf("%s %q: type %T", kind, raw, v)
			}
		}
	})
}

// decodedExtract is extraction by decoding the whole record with
// encoding/json, the obvious implementation the byte scan must agree with.
func decodedExtract(body []byte, defs []fieldDef) [][]any {
	out := make([][]any, len(defs))
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc any
	if dec.Decode(&doc) != nil {
		return out
	}
	var walk func(v any, path []string, visit func(any) bool) bool
	walk = func(v any, path []string, visit func(any) bool) bool {
		if arr, ok := v.([]any); ok {
			for _, e := range arr {
				if _, nested := e.([]any); nested {
					continue
				}
				if !walk(e, path, visit) {
					return false
				}
			}
			return true
		}
		if len(path) == 0 {
			return visit(v)
		}
		if obj, ok := v.(map[string]any); ok {
			if next, ok := obj[path[0]]; ok {
				return walk(next, path[1:], visit)
			}
		}
		return true
	}
	for i, d := range defs {
		var vals []any
		visits := 0
		walk(doc, d.path, func(v any) bool {
			visits++
			var raw []byte
			switch x := v.(type) {
			case json.Number:
				raw = []byte(x)
			case nil, map[string]any, []any:
				return len(vals) < MaxFieldValues && visits < MaxFieldVisits
			default:
				raw, _ = json.Marshal(x)
			}
			if x, ok := jsonFieldValue(d.kind, raw); ok && !containsValue(vals, x) {
				vals = append(vals, x)
			}
			return len(vals) < MaxFieldValues && visits < MaxFieldVisits
		})
		out[i] = vals
	}
	return out
}

// FuzzExtractFieldsMatchesDecoder: on valid UTF-8 JSON, the byte scan
// finds exactly what decoding the whole record finds.
func FuzzExtractFieldsMatchesDecoder(f *testing.F) {
	for _, s := range []string{
		`{"langs":["en","pt"],"createdAt":"2024-01-02T03:04:05Z"}`,
		`{"a":{"b":[{"c":1},{"c":"x"},{"c":[2,[3]]}]},"a":{"b":{"c":true}}}`,
		`[{"langs":"en"},{"langs":["de",["x"]]}]`,
		`{"l\u0061ngs" : [ "e\u006e" , -0 , 10 , 1.5 , false ] }`,
		`{"n":[1,2,3,99999999999999999999,-7],"createdAt":"2024-01-02T05:04:05+02:00"}`,
		`{"a":{"b":{"c":{"d":"deep"}}},"langs":{}}`,
		// Past the values cap inside a nested array: the walk must stop
		// at every level (a review found the outer array going on).
		`{"a":[{"b":[{"c":"0"},{"c":"1"},{"c":"2"},{"c":"3"},{"c":"4"},{"c":"5"},{"c":"6"},{"c":"7"},` +
			`{"c":"8"},{"c":"9"},{"c":"10"},{"c":"11"},{"c":"12"},{"c":"13"},{"c":"14"},{"c":"15"}]},` +
			`{"b":[{"c":"16"}]},{"b":{"c":"17"}}]}`,
	} {
		f.Add([]byte(s))
	}
	defs := []fieldDef{
		{id: 1, path: splitFieldPath("langs"), kind: FieldEquality},
		{id: 2, path: splitFieldPath("a.b.c"), kind: FieldEquality},
		{id: 3, path: splitFieldPath("createdAt"), kind: FieldDatetime},
		{id: 4, path: splitFieldPath("n"), kind: FieldInteger},
		{id: 5, path: splitFieldPath("a.b.c"), kind: FieldInteger},
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got := extractFields(body, defs) // never panics, whatever the bytes
		if !json.Valid(body) || !utf8.Valid(body) {
			return
		}
		if want := decodedExtract(body, defs); !reflect.DeepEqual(got, want) {
			t.Fatalf("body %s:\n scan   %#v\n decode %#v", body, got, want)
		}
	})
}

// The cap of MaxFieldValues values per field and record holds when the
// path crosses two arrays: docs/filters.md's own facets.features.tag, a
// post with MaxFieldValues tags in its first facet and one in each of 99
// more. (The walk lost the stop one level up, and stored 115 values.)
func TestFieldValuesCapHoldsThroughNestedArrays(t *testing.T) {
	facets := make([]string, 100)
	for i := range facets {
		facets[i] = fmt.Sprintf(`{"features":[{"$type":"app.bsky.richtext.facet#tag","tag":"t%d"}]}`, i)
	}
	tags := make([]string, MaxFieldValues)
	for i := range tags {
		tags[i] = fmt.Sprintf(`{"tag":"first%d"}`, i)
	}
	facets[0] = `{"features":[` + strings.Join(tags, ",") + `]}`
	body := []byte(`{"$type":"app.bsky.feed.post","text":"x","facets":[` + strings.Join(facets, ",") + `]}`)
	defs := []fieldDef{{id: 1, path: splitFieldPath("facets.features.tag"), kind: FieldEquality}}
	got, want := extractFields(body, defs)[0], decodedExtract(body, defs)[0]
	if len(got) != MaxFieldValues || !reflect.DeepEqual(got, want) {
		t.Fatalf("%d values %v, want the first %d: %v", len(got), got, MaxFieldValues, want)
	}
}

// TestEscapedKeysAreComparedInPlace: a record whose keys are spelt with
// escapes costs extraction no allocation per key. Each escaped key was
// decoded with encoding/json for every field at every level, so a 60 KB
// record of "\u0061" keys took about 1,500 posts' time to extract.
func TestEscapedKeysAreComparedInPlace(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"reply":{`)
	for range 2000 {
		b.WriteString(`"\u0061":1,`)
	}
	b.WriteString(`"\u0072\u006F\u006ft":{"uri":"at://x"}},"l\u0061ngs":["en"]}`)
	body := []byte(b.String())
	defs := []fieldDef{
		{id: 1, path: splitFieldPath("langs"), kind: FieldEquality},
		{id: 2, path: splitFieldPath("reply.root.uri"), kind: FieldEquality},
	}
	want := [][]any{{"en"}, {"at://x"}}
	if got := extractFields(body, defs); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v, want %#v", got, want)
	}
	if n := testing.AllocsPerRun(5, func() { extractFields(body, defs) }); n > 20 {
		t.Fatalf("%.0f allocations for a record of 2,000 escaped keys", n)
	}
	for raw, want := range map[string]bool{
		`"langs"`: true, `"\u006cangs"`: true, `"lang\u0073"`: true, `"\u006C\u0061\u006E\u0067\u0073"`: true,
		`"lang"`: false, `"langss"`: false, `"\u006cang"`: false, `"\u006cangs\u0073"`: false,
		`"l\nangs"`: false, `"\u00ecangs"`: false, `"\u006gangs"`: false, `"lang\u007"`: false, `"\\angs"`: false,
	} {
		if got := keyIs([]byte(raw), "langs"); got != want {
			t.Errorf("keyIs(%s): %t, want %t", raw, got, want)
		}
	}
}

// TestFieldExtractionExaminesABoundedNumberOfValues: an array of thousands
// of repeated or unparsable values at a field's path is examined only up
// to MaxFieldVisits values. Only distinct converted values counted, so each
// element of a 60 KB array of one repeated datetime was parsed (three
// regular expressions each): about 4 ms a field for one record.
func TestFieldExtractionExaminesABoundedNumberOfValues(t *testing.T) {
	dup := func(v string, n int, last string) []byte {
		return []byte(`{"langs":[` + strings.Repeat(v+",", n) + last + `]}`)
	}
	equality := []fieldDef{{id: 1, path: splitFieldPath("langs"), kind: FieldEquality}}
	datetime := []fieldDef{{id: 1, path: splitFieldPath("langs"), kind: FieldDatetime}}
	for _, tc := range []struct {
		name string
		body []byte
		defs []fieldDef
	}{
		{"repeated string", dup(`"en"`, 3000, `"pt"`), equality},
		{"repeated datetime", dup(`"2024-01-01T00:00:00"`, 3000, `"2024-01-02T00:00:00Z"`), datetime},
		{"unparsable datetimes", dup(`"9999-99-99T99:99:99Z"`, 3000, `"2024-01-02T00:00:00Z"`), datetime},
	} {
		if n := testing.AllocsPerRun(5, func() { extractFields(tc.body, tc.defs) }); n > 8*MaxFieldVisits {
			t.Errorf("%s: %.0f allocations for one field", tc.name, n)
		}
		if got := extractFields(tc.body, tc.defs)[0]; len(got) > 1 || !reflect.DeepEqual(got, decodedExtract(tc.body, tc.defs)[0]) {
			t.Errorf("%s: %v, want at most one value, as decoding finds", tc.name, got)
		}
	}
	// Values past the visits are not indexed, like those past the values cap.
	var elems []string
	for i := range MaxFieldVisits + 1 {
		elems = append(elems, fmt.Sprintf(`"v%d"`, i%2))
	}
	elems[MaxFieldVisits] = `"late"`
	got := extractFields([]byte(`{"langs":[`+strings.Join(elems, ",")+`]}`), equality)[0]
	if want := []any{"v0", "v1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("%v, want %v", got, want)
	}
}
