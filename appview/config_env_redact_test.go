package appview

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// The printed config is a config file: parsing it gives back the config,
// durations and all.
func TestMarshalRedactedYAMLRoundTrips(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Jetstream.Rewind = 1500 * time.Millisecond
	cfg.HTTP.Listen = "127.0.0.1:8080"
	cfg.XRPC.Namespace = "org.example.timeline"
	cfg.Feeds = append(cfg.Feeds, FeedConfig{
		Name: "mutuals", FollowCollection: "app.bsky.graph.follow", MergeLimit: 0,
		Targets: []TargetConfig{{Collection: "app.bsky.feed.repost", Cap: 50}, {Collection: "app.bsky.feed.post", Cap: 10}},
	})
	out, err := cfg.MarshalRedactedYAML()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"rewind: 1.5s\n", "batch_interval: 100ms\n", "listen: 127.0.0.1:8080\n", "merge_limit: 0\n"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("printed config lacks %q:\n%s", want, out)
		}
	}
	back, err := ParseConfig(bytes.NewReader(out))
	if err != nil {
		t.Fatalf("printed config does not parse: %v\n%s", err, out)
	}
	if !reflect.DeepEqual(back, cfg) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", back, cfg)
	}
}

// secretConfig stands in for a Config with secrets until one has some.
type secretConfig struct {
	Name   string   `yaml:"name"`
	Token  string   `yaml:"token" secret:"true"`
	Empty  string   `yaml:"empty" secret:"true"`
	Keys   []string `yaml:"keys" secret:"true"`
	Nested struct {
		Password string `yaml:"password" secret:"true"`
		Port     int    `yaml:"port"`
	} `yaml:"nested"`
}

func TestRedaction(t *testing.T) {
	var c secretConfig
	c.Name = "visible"
	c.Token = "s3cret-token"
	c.Keys = []string{"k3y-one", "k3y-two"}
	c.Nested.Password = "hunter2"
	c.Nested.Port = 5432

	n, err := redactedNode(reflect.ValueOf(c), false)
	if err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	for _, leak := range []string{"s3cret", "k3y", "hunter2"} {
		if bytes.Contains(out, []byte(leak)) {
			t.Errorf("printed %q:\n%s", leak, out)
		}
	}
	var back secretConfig
	if err := yaml.Unmarshal(out, &back); err != nil {
		t.Fatalf("redacted output does not parse: %v\n%s", err, out)
	}
	// Empty secrets stay empty (so "is it set?" is still answered); set
	// ones read REDACTED; everything else is kept.
	if back.Name != "visible" || back.Token != Redacted || back.Empty != "" ||
		!reflect.DeepEqual(back.Keys, []string{Redacted, Redacted}) ||
		back.Nested.Password != Redacted || back.Nested.Port != 5432 {
		t.Errorf("redacted: %+v", back)
	}
}

func TestConfigLogValue(t *testing.T) {
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("effective config", "config", DefaultConfig())
	var line struct {
		Config struct {
			Database  map[string]string `json:"database"`
			Jetstream map[string]string `json:"jetstream"`
			Feeds     map[string]struct {
				Name    string                       `json:"name"`
				Targets map[string]map[string]string `json:"targets"`
			} `json:"feeds"`
		} `json:"config"`
	}
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, buf.Bytes())
	}
	c := line.Config
	if c.Database["path"] != "./appview.db" || c.Jetstream["rewind"] != "5s" ||
		!strings.HasPrefix(c.Jetstream["urls"], "wss://jetstream2.us-east.bsky.network/subscribe,wss://") ||
		c.Feeds["0"].Name != "following" || c.Feeds["0"].Targets["0"]["collection"] != "app.bsky.feed.post" {
		t.Errorf("logged config: %s", buf.Bytes())
	}
}

// A URL's userinfo is a credential however the field is tagged: a PLC
// directory or handle resolver behind basic auth, a token as user name.
// Printed and logged configs show the rest of the URL.
func TestURLCredentialsAreRedacted(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Identity.PLCURL = "https://bob:hunter2@plc.example.com"
	cfg.Identity.HandleResolverURL = "https://t0ken@resolver.example.com/resolve"
	out, err := cfg.MarshalRedactedYAML()
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("config", "config", cfg)
	for _, shown := range []string{string(out), logged.String()} {
		for _, leak := range []string{"hunter2", "bob", "t0ken"} {
			if strings.Contains(shown, leak) {
				t.Errorf("shown %q:\n%s", leak, shown)
			}
		}
		for _, want := range []string{"plc.example.com", "resolver.example.com/resolve"} {
			if !strings.Contains(shown, want) {
				t.Errorf("lacks %q:\n%s", want, shown)
			}
		}
	}
	back, err := ParseConfig(bytes.NewReader(out))
	if err != nil {
		t.Fatalf("printed config does not parse: %v\n%s", err, out)
	}
	if got := back.Identity.PLCURL; got != "https://"+Redacted+"@plc.example.com" {
		t.Errorf("printed URL reads back as %q", got)
	}
	// A URL that does not parse is redacted all the same (found by a
	// review: the first version used url.Parse and printed these whole).
	for _, raw := range []string{
		"wss://bob:50%off@js.example.com/subscribe",
		"wss://bob:hunter2@js.example.com:port/subscribe",
		"https://bob:hunter2@host/p@th?q=a@b",
	} {
		if got := redactUserinfo(raw); strings.Contains(got, "bob") || strings.Contains(got, "hunter2") || strings.Contains(got, "50%off") {
			t.Errorf("redactUserinfo(%q) = %q", raw, got)
		}
	}
}

// A Jetstream URL with user information is refused (the websocket dialer
// would refuse it at every connect, and the daemon logs its Jetstream
// URLs), and the refusal does not print the credential either.
func TestJetstreamURLsCarryNoCredentials(t *testing.T) {
	for _, raw := range []string{"wss://bob:hunter2@js.example.com/subscribe", "wss://bob:50%off@js.example.com/subscribe", "wss://t0ken@js.example.com/subscribe"} {
		cfg := DefaultConfig()
		cfg.Jetstream.URLs = []string{raw}
		err := cfg.Validate()
		if err == nil {
			t.Errorf("%q accepted", raw)
			continue
		}
		for _, leak := range []string{"hunter2", "50%off", "t0ken"} {
			if strings.Contains(err.Error(), leak) {
				t.Errorf("the refusal of %q prints %q: %v", raw, leak, err)
			}
		}
	}
}
