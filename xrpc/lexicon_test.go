package xrpc

import (
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"slices"
	"testing"

	"github.com/atfeeds/appview/lexicons"
)

func TestLexiconsServedWithNamespace(t *testing.T) {
	cfg := testConfig(newFakeReader())
	cfg.Namespace = "org.example.timeline"
	base := serve(t, cfg)

	res := do(t, http.MethodGet, base+"/lexicons/org.example.timeline.getFeed.json")
	if res.Status != http.StatusOK {
		t.Fatalf("status %d, body %s", res.Status, res.Body)
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Errorf("content type %q", ct)
	}
	var doc struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(res.Body, &doc); err != nil || doc.ID != "org.example.timeline.getFeed" {
		t.Fatalf("document id %q (%v)", doc.ID, err)
	}

	for _, path := range []string{
		"/lexicons/com.example.appview.getFeed.json", // the default namespace is not served
		"/lexicons/org.example.timeline.getFeed",
		"/lexicons/org.example.timeline.nothing.json",
	} {
		res := do(t, http.MethodGet, base+path)
		if res.Status != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, res.Status)
		}
		decodeEnvelope(t, res.Body)
	}
}

// TestGetFeedGoldenMatchesLexicon keeps the golden response and the
// published Lexicon in step: every field of the response is declared, and
// every required field is present. The e2e tests validate live responses
// with the reference validator; this catches drift in a plain go test.
func TestGetFeedGoldenMatchesLexicon(t *testing.T) {
	docs, err := lexicons.Render(lexicons.DefaultNamespace)
	if err != nil {
		t.Fatal(err)
	}
	type object struct {
		Required   []string                   `json:"required"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	var lex struct {
		Defs struct {
			Main struct {
				Output struct {
					Schema object `json:"schema"`
				} `json:"output"`
			} `json:"main"`
			Record object `json:"record"`
		} `json:"defs"`
	}
	if err := json.Unmarshal(docs[lexicons.DefaultNamespace+".getFeed"], &lex); err != nil {
		t.Fatal(err)
	}
	golden, err := os.ReadFile("testdata/getfeed.golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var resp map[string]json.RawMessage
	if err := json.Unmarshal(golden, &resp); err != nil {
		t.Fatal(err)
	}
	var records []map[string]json.RawMessage
	if err := json.Unmarshal(resp["records"], &records); err != nil || len(records) == 0 {
		t.Fatalf("golden records: %v", err)
	}
	conforms := func(what string, got map[string]json.RawMessage, o object) {
		t.Helper()
		for k := range got {
			if _, ok := o.Properties[k]; !ok {
				t.Errorf("%s: field %q is not in the Lexicon (declared: %v)", what, k, slices.Sorted(maps.Keys(o.Properties)))
			}
		}
		for _, k := range o.Required {
			if _, ok := got[k]; !ok {
				t.Errorf("%s: required field %q missing", what, k)
			}
		}
	}
	conforms("output", resp, lex.Defs.Main.Output.Schema)
	for _, r := range records {
		conforms("record", r, lex.Defs.Record)
	}
}
