package lexicons

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestRenderDefaultNamespace(t *testing.T) {
	docs, err := Render(DefaultNamespace)
	if err != nil {
		t.Fatal(err)
	}
	got := slices.Sorted(maps.Keys(docs))
	want := []string{"com.example.appview.getFeed", "com.example.appview.notifyOfUpdate"}
	if !slices.Equal(got, want) {
		t.Fatalf("documents %v, want %v", got, want)
	}
}

func TestRenderMovesNamespace(t *testing.T) {
	docs, err := Render("org.example.timeline")
	if err != nil {
		t.Fatal(err)
	}
	doc, ok := docs["org.example.timeline.getFeed"]
	if !ok {
		t.Fatalf("no getFeed in %v", slices.Collect(maps.Keys(docs)))
	}
	if strings.Contains(string(doc), `"`+DefaultNamespace+`.`) {
		t.Errorf("rendered document still refers to %s:\n%s", DefaultNamespace, doc)
	}
	var v struct {
		Lexicon int            `json:"lexicon"`
		ID      string         `json:"id"`
		Defs    map[string]any `json:"defs"`
	}
	if err := json.Unmarshal(doc, &v); err != nil {
		t.Fatal(err)
	}
	if v.Lexicon != 1 || v.ID != "org.example.timeline.getFeed" || v.Defs["main"] == nil {
		t.Errorf("rendered document: lexicon %d, id %q, defs %v", v.Lexicon, v.ID, slices.Collect(maps.Keys(v.Defs)))
	}
}
