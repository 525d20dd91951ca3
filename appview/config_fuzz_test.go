package appview

import (
	"bytes"
	"os"
	"reflect"
	"testing"

	"go.yaml.in/yaml/v3"
)

// FuzzParseConfig asserts invariants only: ParseConfig never panics, what
// it accepts is valid, and what it accepts survives a round trip through
// yaml.Marshal unchanged.
func FuzzParseConfig(f *testing.F) {
	example, err := os.ReadFile(exampleConfigPath)
	if err != nil {
		f.Fatal(err)
	}
	seeds := []string{
		string(example),
		"",
		"---\n",
		"~\n",
		"feeds: []\n",
		"feeds: ~\n",
		"feeds:\n  - name: a\n    follow_collection: com.example.graph.follow\n    targets: [{collection: com.example.feed.post}]\n",
		"feeds:\n  - name: a\n    follow_collection: app.bsky.graph.follow\n    merge_limit: 0\n    targets: [{collection: app.bsky.feed.post, cap: 0}]\n",
		"jetstream:\n  rewind: 5\n",
		"jetstream:\n  rewind: -5s\n  urls: [ws://localhost:6008/subscribe]\n",
		"jetstream: &j\n  queue_size: 1\nhttp: *j\n",
		"a: &a [*a]\n",
		"x: &x {y: *x}\n",
		"<<: {log: {level: debug}}\n",
		"log:\n  level: info\n  level: debug\n",
		"? [a]\n: b\n",
		"!!binary aGVsbG8=\n",
		"log: {level: !!str 5}\n",
		"a\n---\nb\n",
		"feeds: [{name: a, targets: [{collection: a.b.c, cap: 9223372036854775807}]}]\n",
		"ingest: {batch_size: 1e3, batch_interval: 1h}\n",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig(bytes.NewReader(data))
		if err != nil {
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("accepted config fails Validate: %v\ninput:\n%s", err, data)
		}
		out, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatalf("marshal accepted config: %v", err)
		}
		again, err := ParseConfig(bytes.NewReader(out))
		if err != nil {
			t.Fatalf("re-parse marshalled config: %v\nmarshalled:\n%s", err, out)
		}
		if !reflect.DeepEqual(cfg, again) {
			t.Fatalf("round trip changed the config:\n got %+v\nwant %+v", again, cfg)
		}
	})
}
