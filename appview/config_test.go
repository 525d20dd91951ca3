package appview

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/atfeeds/appview/feeds"
)

const exampleConfigPath = "../config.example.yaml"

// The example file documents every key with its default; decoding it must
// give exactly DefaultConfig, so the two cannot drift apart.
func TestExampleConfigIsDefault(t *testing.T) {
	cfg, err := LoadConfig(exampleConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if want := DefaultConfig(); !reflect.DeepEqual(cfg, want) {
		t.Fatalf("example config differs from DefaultConfig:\n got %+v\nwant %+v", cfg, want)
	}
}

func TestDefaultConfig(t *testing.T) {
	cfg := DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("default config invalid: %v", err)
	}
	// Fresh slices on every call: changing one result leaves the next alone.
	cfg.Jetstream.URLs[0] = "changed"
	cfg.Feeds[0].Targets[0].Cap = 1
	if again := DefaultConfig(); again.Jetstream.URLs[0] == "changed" || again.Feeds[0].Targets[0].Cap != 200 {
		t.Fatal("DefaultConfig shares slices between calls")
	}
}

func TestLoadConfig(t *testing.T) {
	cfg, err := LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg, DefaultConfig()) {
		t.Fatal(`LoadConfig("") is not DefaultConfig`)
	}

	dir := t.TempDir()
	if _, err := LoadConfig(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("missing file: got error %v", err)
	}

	path := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(path, []byte("http:\n  listen: \"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = LoadConfig(path)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "http.listen: must not be empty") {
		t.Fatalf("invalid file: got error %v", err)
	}
}

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		// want edits DefaultConfig into the expected result; nil when an
		// error is expected.
		want func(*Config)
		// errs are substrings the error must contain.
		errs []string
	}{
		{name: "empty", yaml: "", want: func(*Config) {}},
		{name: "comments only", yaml: "# nothing here\n", want: func(*Config) {}},
		{name: "document marker only", yaml: "---\n", want: func(*Config) {}},
		{
			name: "override keeps sibling defaults",
			yaml: "database:\n  path: /var/lib/appview.db\njetstream:\n  rewind: 0s\n",
			want: func(c *Config) {
				c.Database.Path = "/var/lib/appview.db"
				c.Jetstream.Rewind = 0
			},
		},
		{
			name: "durations with units",
			yaml: "jetstream:\n  read_timeout: 1m30s\ningest:\n  batch_interval: 250ms\n",
			want: func(c *Config) {
				c.Jetstream.ReadTimeout = 90 * time.Second
				c.Ingest.BatchInterval = 250 * time.Millisecond
			},
		},
		{
			name: "urls replace the list",
			yaml: "jetstream:\n  urls: [ws://localhost:6008/subscribe]\n",
			want: func(c *Config) { c.Jetstream.URLs = []string{"ws://localhost:6008/subscribe"} },
		},
		{
			name: "custom follow collection, omitted cap and merge_limit get defaults",
			yaml: `
feeds:
  - name: blocks-of-friends
    follow_collection: com.example.graph.follow
    targets:
      - collection: com.example.feed.post
      - collection: app.bsky.feed.repost
        cap: 50
`,
			want: func(c *Config) {
				c.Feeds = []FeedConfig{{
					Name:             "blocks-of-friends",
					FollowCollection: "com.example.graph.follow",
					MergeLimit:       100,
					Targets: []TargetConfig{
						{Collection: "com.example.feed.post", Cap: 200},
						{Collection: "app.bsky.feed.repost", Cap: 50},
					},
				}}
			},
		},
		{
			name: "explicit merge_limit 0 stays 0",
			yaml: "feeds:\n  - name: a\n    follow_collection: app.bsky.graph.follow\n    merge_limit: 0\n    targets: [{collection: app.bsky.feed.post}]\n",
			want: func(c *Config) {
				c.Feeds = []FeedConfig{{Name: "a", FollowCollection: "app.bsky.graph.follow", MergeLimit: 0,
					Targets: []TargetConfig{{Collection: "app.bsky.feed.post", Cap: 200}}}}
			},
		},
		{
			name: "feeds sharing collections",
			yaml: `
feeds:
  - name: posts
    follow_collection: app.bsky.graph.follow
    targets: [{collection: app.bsky.feed.post}]
  - name: posts-and-reposts
    follow_collection: app.bsky.graph.follow
    targets: [{collection: app.bsky.feed.post}, {collection: app.bsky.feed.repost}]
`,
			want: func(c *Config) {
				c.Feeds = []FeedConfig{
					{Name: "posts", FollowCollection: "app.bsky.graph.follow", MergeLimit: 100,
						Targets: []TargetConfig{{Collection: "app.bsky.feed.post", Cap: 200}}},
					{Name: "posts-and-reposts", FollowCollection: "app.bsky.graph.follow", MergeLimit: 100,
						Targets: []TargetConfig{{Collection: "app.bsky.feed.post", Cap: 200}, {Collection: "app.bsky.feed.repost", Cap: 200}}},
				}
			},
		},
		{name: "no feeds", yaml: "feeds: []\n", want: func(c *Config) { c.Feeds = []FeedConfig{} }},
		{
			name: "explicit cap 0",
			yaml: "feeds:\n  - name: a\n    follow_collection: app.bsky.graph.follow\n    targets: [{collection: app.bsky.feed.post, cap: 0}]\n",
			errs: []string{"feeds[0].targets[0].cap: must be positive"},
		},
		{
			name: "unknown top-level key",
			yaml: "databse:\n  path: x.db\n",
			errs: []string{"line 1: databse: unknown key", "database, jetstream"},
		},
		{
			name: "unknown key in a section",
			yaml: "jetstream:\n  url: wss://example.com/subscribe\n",
			errs: []string{"line 2: jetstream.url: unknown key"},
		},
		{
			name: "unknown key in a feed target",
			yaml: "feeds:\n  - name: a\n    follow_collection: app.bsky.graph.follow\n    targets:\n      - collection: app.bsky.feed.post\n        kap: 5\n",
			errs: []string{"line 6: feeds[0].targets[0].kap: unknown key (want one of collection, cap, fields)"},
		},
		{
			name: "several unknown keys reported together",
			yaml: "foo: 1\nlog:\n  colour: true\n",
			errs: []string{"foo: unknown key", "log.colour: unknown key"},
		},
		{
			name: "duplicate key",
			yaml: "log:\n  level: info\n  level: debug\n",
			errs: []string{"line 3: log.level: duplicate key (first at line 2)"},
		},
		{
			name: "empty value",
			yaml: "feeds:\n  - name: a\n    follow_collection: app.bsky.graph.follow\n    merge_limit:\n    targets: [{collection: app.bsky.feed.post}]\n",
			errs: []string{"feeds[0].merge_limit: empty value"},
		},
		{name: "empty section", yaml: "jetstream:\n", errs: []string{"jetstream: empty value"}},
		{name: "null feeds", yaml: "feeds: ~\n", errs: []string{"feeds: empty value"}},
		{name: "bare integer duration", yaml: "jetstream:\n  rewind: 5\n", errs: []string{"jetstream.rewind: want a duration with a unit"}},
		{name: "float duration", yaml: "ingest:\n  batch_interval: 0.5\n", errs: []string{"ingest.batch_interval: want a duration with a unit"}},
		{name: "bad duration", yaml: "jetstream:\n  read_timeout: soon\n", errs: []string{"soon"}},
		{name: "misspelt unit names the key", yaml: "jetstream:\n  read_timeout: 5sec\n", errs: []string{
			`line 2: jetstream.read_timeout: "5sec": want a duration with a unit`}},
		{name: "overflowing duration names the key", yaml: "backfill:\n  viewer_ttl: 3000000h\n", errs: []string{
			`line 2: backfill.viewer_ttl: "3000000h": want a duration with a unit`}},
		{name: "negative duration", yaml: "jetstream:\n  rewind: -1s\n", errs: []string{"jetstream.rewind: must not be negative"}},
		{name: "not an int", yaml: "jetstream:\n  queue_size: many\n", errs: []string{"many"}},
		{name: "fraction for an int", yaml: "database:\n  record_cache_mb: 0.5\nbackfill:\n  depth: 50.9\n", errs: []string{
			`line 2: database.record_cache_mb: "0.5": want an integer`, `line 4: backfill.depth: "50.9": want an integer`}},
		{name: "quoted int", yaml: "backfill:\n  depth: \"50\"\n", errs: []string{`backfill.depth: "50": want an integer`}},
		{name: "yes for a bool", yaml: "jetstream:\n  compression: yes\n", errs: []string{`jetstream.compression: "yes": want true or false`}},
		{name: "section is a value", yaml: "database: x.db\n", errs: []string{"database: want a mapping"}},
		{name: "list where a value belongs", yaml: "http:\n  listen: [a, b]\n", errs: []string{"http.listen: want a single value, got a list"}},
		{name: "urls is a value", yaml: "jetstream:\n  urls: wss://example.com/subscribe\n", errs: []string{"jetstream.urls: want a list"}},
		{name: "top level is a list", yaml: "- a\n", errs: []string{"config: want a mapping"}},
		{name: "two documents", yaml: "log:\n  level: info\n---\nlog:\n  level: debug\n", errs: []string{"more than one YAML document"}},
		{name: "syntax error", yaml: "log: [\n", errs: []string{"parse config"}},
		{
			name: "validation errors are joined",
			yaml: "log:\n  level: loud\n  format: xml\n",
			errs: []string{`log.level: "loud": must be one of`, `log.format: "xml": must be one of`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ParseConfig(strings.NewReader(tt.yaml))
			if tt.want == nil {
				if err == nil {
					t.Fatalf("no error, want one containing %q", tt.errs)
				}
				for _, s := range tt.errs {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q lacks %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := DefaultConfig()
			tt.want(&want)
			if !reflect.DeepEqual(cfg, want) {
				t.Fatalf("got  %+v\nwant %+v", cfg, want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	feed := func(name string) FeedConfig {
		return FeedConfig{Name: name, FollowCollection: "app.bsky.graph.follow", MergeLimit: 100,
			Targets: []TargetConfig{{Collection: "app.bsky.feed.post", Cap: 200}}}
	}
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string // "" means valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"nil feeds", func(c *Config) { c.Feeds = nil }, ""},
		{"ws url with port", func(c *Config) { c.Jetstream.URLs = []string{"ws://127.0.0.1:6008/subscribe"} }, ""},
		{"zero rewind", func(c *Config) { c.Jetstream.Rewind = 0 }, ""},
		{"listen with host", func(c *Config) { c.HTTP.Listen = "127.0.0.1:0" }, ""},
		{"custom follow collection", func(c *Config) { c.Feeds[0].FollowCollection = "com.example.graph.follow" }, ""},
		{"batch size upper bound", func(c *Config) { c.Ingest.BatchSize = 100000 }, ""},
		{"no first-read queue", func(c *Config) { c.Backfill.Admission.MaxQueued = 0 }, ""},
		{"one first read at a time", func(c *Config) { c.Backfill.Admission.MaxRunning = 1 }, ""},

		{"no first reads", func(c *Config) { c.Backfill.Admission.MaxRunning = 0 }, "backfill.admission.max_running: must be from 1 to 1024, got 0"},
		{"too many first reads", func(c *Config) { c.Backfill.Admission.MaxRunning = 1025 }, "backfill.admission.max_running: must be from 1 to 1024"},
		{"negative first-read queue", func(c *Config) { c.Backfill.Admission.MaxQueued = -1 }, "backfill.admission.max_queued: must be from 0 to 100000, got -1"},
		{"zero client burst", func(c *Config) { c.Backfill.Admission.ClientBurst = 0 }, "backfill.admission.client_burst: must be from 1 to 10000"},
		{"zero max clients", func(c *Config) { c.Backfill.Admission.MaxClients = 0 }, "backfill.admission.max_clients: must be from 1 to 10000000"},
		{"zero client interval", func(c *Config) { c.Backfill.Admission.ClientInterval = 0 }, "backfill.admission.client_interval: must be positive"},
		{"day-long client interval", func(c *Config) { c.Backfill.Admission.ClientInterval = 25 * time.Hour }, "backfill.admission.client_interval: must be at most 24h"},
		{"zero retry after", func(c *Config) { c.Backfill.Admission.RetryAfter = 0 }, "backfill.admission.retry_after: must be positive"},
		{"long retry after", func(c *Config) { c.Backfill.Admission.RetryAfter = 2 * time.Hour }, "backfill.admission.retry_after: must be at most 1h"},

		{"empty database path", func(c *Config) { c.Database.Path = "" }, "database.path: must not be empty"},
		{"no urls", func(c *Config) { c.Jetstream.URLs = nil }, "jetstream.urls: must list at least one URL"},
		{"http url", func(c *Config) { c.Jetstream.URLs[1] = "https://jetstream.example/subscribe" }, "jetstream.urls[1]: URL \"https://jetstream.example/subscribe\": scheme must be ws or wss"},
		{"unparsable url", func(c *Config) { c.Jetstream.URLs[0] = "wss://bad host/" }, "jetstream.urls[0]: invalid URL"},
		{"url without host", func(c *Config) { c.Jetstream.URLs[0] = "wss:///subscribe" }, "jetstream.urls[0]: URL \"wss:///subscribe\": missing host"},
		{"url with query", func(c *Config) { c.Jetstream.URLs[0] = "wss://a.example/subscribe?compress=true" }, "jetstream.urls[0]: URL \"wss://a.example/subscribe?compress=true\": must not carry a query"},
		{"url with fragment", func(c *Config) { c.Jetstream.URLs[0] = "wss://a.example/subscribe#x" }, "jetstream.urls[0]: URL \"wss://a.example/subscribe#x\": must not carry a fragment"},
		{"negative rewind", func(c *Config) { c.Jetstream.Rewind = -time.Second }, "jetstream.rewind: must not be negative"},
		{"zero max frame", func(c *Config) { c.Jetstream.MaxFrameBytes = 0 }, "jetstream.max_frame_bytes: must be between 1 and 67108864"},
		{"huge max frame", func(c *Config) { c.Jetstream.MaxFrameBytes = math.MaxInt64 }, "jetstream.max_frame_bytes: must be between 1 and 67108864"},
		{"zero read timeout", func(c *Config) { c.Jetstream.ReadTimeout = 0 }, "jetstream.read_timeout: must be at least 40s (Jetstream pings every 30s), got 0s"},
		{"short read timeout", func(c *Config) { c.Jetstream.ReadTimeout = 10 * time.Second }, "jetstream.read_timeout: must be at least 40s"},
		{"read timeout of the ping interval", func(c *Config) { c.Jetstream.ReadTimeout = 30 * time.Second }, "jetstream.read_timeout: must be at least 40s"},
		{"shortest read timeout", func(c *Config) { c.Jetstream.ReadTimeout = minReadTimeout }, ""},
		{"trusted proxies", func(c *Config) {
			c.HTTP.TrustedProxies = []string{"10.0.0.0/8", "127.0.0.1", "::1", "fd00::/8", "::ffff:192.0.2.0/120"}
		}, ""},
		{"trusted proxy with host bits", func(c *Config) { c.HTTP.TrustedProxies = []string{"10.0.0.1/8"} },
			`http.trusted_proxies[0]: "10.0.0.1/8": want an address or a CIDR prefix such as 10.0.0.0/8 (host bits set: did you mean 10.0.0.0/8?)`},
		{"trusted proxy of every address", func(c *Config) { c.HTTP.TrustedProxies = []string{"127.0.0.1", "::/0"} },
			`http.trusted_proxies[1]: "::/0"`},
		{"trusted proxy not an address", func(c *Config) { c.HTTP.TrustedProxies = []string{"proxy.internal"} },
			`http.trusted_proxies[0]: "proxy.internal"`},
		{"too many trusted proxies", func(c *Config) {
			c.HTTP.TrustedProxies = nil
			for i := range maxTrustedProxies + 1 {
				c.HTTP.TrustedProxies = append(c.HTTP.TrustedProxies, fmt.Sprintf("10.0.%d.1", i))
			}
		}, "http.trusted_proxies: at most 64 entries, got 65"},
		{"short retention window", func(c *Config) { c.Jetstream.RetentionWindow = time.Minute }, "jetstream.retention_window: must be at least 10m0s, got 1m0s"},
		{"no idle timeout", func(c *Config) { c.Jetstream.IdleTimeout = 0 }, ""},
		{"shortest idle timeout", func(c *Config) { c.Jetstream.IdleTimeout = minIdleTimeout }, ""},
		{"millisecond idle timeout", func(c *Config) { c.Jetstream.IdleTimeout = time.Millisecond }, "jetstream.idle_timeout: must be 0 (never) or at least 30s, got 1ms"},
		{"negative idle timeout", func(c *Config) { c.Jetstream.IdleTimeout = -time.Second }, "jetstream.idle_timeout: must be 0 (never) or at least 30s, got -1s"},
		{"zero queue", func(c *Config) { c.Jetstream.QueueSize = 0 }, "jetstream.queue_size: must be between 1 and 1000000"},
		{"huge queue", func(c *Config) { c.Jetstream.QueueSize = 100_000_000_000 }, "jetstream.queue_size: must be between 1 and 1000000"},
		{"nanosecond lease", func(c *Config) { c.Backfill.FirstReadLease = 2 }, "backfill.first_read_lease: must be at least 100ms, got 2ns"},
		{"short viewer ttl", func(c *Config) { c.Backfill.ViewerTTL = 30 * time.Minute }, "backfill.viewer_ttl: must be at least 2h, got 30m0s"},
		{"most backfill concurrency", func(c *Config) { c.Backfill.Concurrency = 1024 }, ""},
		{"too much backfill concurrency", func(c *Config) { c.Backfill.Concurrency = 4_000_000_000 }, "backfill.concurrency: must be at most 1024, got 4000000000"},
		{"zero sweep actors", func(c *Config) { c.Sweep.Actors = 0 }, "sweep.actors: must be between 1 and 50000"},
		{"huge sweep actors", func(c *Config) { c.Sweep.Actors = 1 << 62 }, "sweep.actors: must be between 1 and 50000"},
		{"tombstones shorter than the rewind", func(c *Config) { c.Jetstream.Rewind, c.Sweep.TombstoneWindow = 10*time.Minute, 8*time.Minute }, "sweep.tombstone_window: must cover a failover's rewind (10m0s: jetstream.rewind, at least 5m)"},
		{"retention shorter than the rewind", func(c *Config) { c.Jetstream.Rewind, c.Sweep.Retention = time.Minute, 30*time.Second }, "sweep.retention: must cover a failover's rewind (5m0s: jetstream.rewind, at least 5m)"},
		{"tombstones under a failover's rewind", func(c *Config) { c.Jetstream.Rewind, c.Sweep.TombstoneWindow = 0, 4*time.Minute }, "sweep.tombstone_window: must cover a failover's rewind (5m0s: jetstream.rewind, at least 5m)"},
		{"windows equal to a failover's rewind", func(c *Config) {
			c.Jetstream.Rewind, c.Sweep.Retention, c.Sweep.TombstoneWindow = time.Minute, 5*time.Minute, 5*time.Minute
		}, ""},
		{"windows equal to a long rewind", func(c *Config) {
			c.Jetstream.Rewind, c.Sweep.Retention, c.Sweep.TombstoneWindow = 10*time.Minute, 10*time.Minute, 10*time.Minute
		}, ""},
		{"zero batch size", func(c *Config) { c.Ingest.BatchSize = 0 }, "ingest.batch_size: must be between 1 and 100000"},
		{"huge batch size", func(c *Config) { c.Ingest.BatchSize = 100001 }, "ingest.batch_size: must be between 1 and 100000"},
		{"zero batch interval", func(c *Config) { c.Ingest.BatchInterval = 0 }, "ingest.batch_interval: must be positive"},
		{"zero first-read lease", func(c *Config) { c.Backfill.FirstReadLease = 0 }, "backfill.first_read_lease: must be positive"},
		{"empty listen", func(c *Config) { c.HTTP.Listen = "" }, "http.listen: must not be empty"},
		{"listen without port", func(c *Config) { c.HTTP.Listen = "8080" }, "http.listen: must be host:port"},
		{"listen port out of range", func(c *Config) { c.HTTP.Listen = ":99999" }, `http.listen: port "99999": must be a number from 0 to 65535`},
		{"listen port not a number", func(c *Config) { c.HTTP.Listen = "127.0.0.1:http" }, `http.listen: port "http": must be a number`},
		{"listen on an empty port", func(c *Config) { c.HTTP.Listen = "127.0.0.1:" }, `http.listen: port "": must be a number`},
		{"listen on a random port", func(c *Config) { c.HTTP.Listen = "127.0.0.1:0" }, ""},
		{"admin listen", func(c *Config) { c.HTTP.AdminListen = "127.0.0.1:9090" }, ""},
		{"admin listen on the same port, another host", func(c *Config) { c.HTTP.Listen, c.HTTP.AdminListen = "10.0.0.1:8080", "127.0.0.1:8080" }, ""},
		{"admin listen on a random port beside one", func(c *Config) { c.HTTP.Listen, c.HTTP.AdminListen = "127.0.0.1:0", "127.0.0.1:0" }, ""},
		{"admin listen without port", func(c *Config) { c.HTTP.AdminListen = "9090" }, "http.admin_listen: must be host:port, such as 127.0.0.1:9090"},
		{"admin listen port out of range", func(c *Config) { c.HTTP.AdminListen = "127.0.0.1:70000" }, `http.admin_listen: port "70000": must be a number from 0 to 65535`},
		{"admin listen same as listen", func(c *Config) { c.HTTP.AdminListen = ":8080" }, `http.admin_listen: ":8080": must differ from http.listen (":8080")`},
		{"admin listen inside the listen wildcard", func(c *Config) { c.HTTP.AdminListen = "127.0.0.1:8080" }, `http.admin_listen: "127.0.0.1:8080": must differ from http.listen (":8080")`},
		{"admin listen is the wildcard of listen", func(c *Config) { c.HTTP.Listen, c.HTTP.AdminListen = "127.0.0.1:8080", "0.0.0.0:8080" }, "http.admin_listen"},
		{"admin listen on localhost beside its IPv4 loopback", func(c *Config) { c.HTTP.Listen, c.HTTP.AdminListen = "127.0.0.1:8080", "localhost:8080" }, `http.admin_listen: "localhost:8080": must differ from http.listen ("127.0.0.1:8080")`},
		// Go listens on a name's IPv4 address when it has one, so
		// localhost beside the IPv6 loopback binds two sockets.
		{"admin listen on the IPv6 loopback beside localhost", func(c *Config) { c.HTTP.Listen, c.HTTP.AdminListen = "localhost:8080", "[::1]:8080" }, ""},
		{"admin listen on localhost in capitals", func(c *Config) { c.HTTP.Listen, c.HTTP.AdminListen = "LocalHost:8080", "localhost:8080" }, "http.admin_listen"},
		{"admin listen on an IPv4-mapped spelling", func(c *Config) { c.HTTP.Listen, c.HTTP.AdminListen = "127.0.0.1:8080", "[::ffff:127.0.0.1]:8080" }, "http.admin_listen"},
		{"admin listen on another spelling of an IPv6 address", func(c *Config) { c.HTTP.Listen, c.HTTP.AdminListen = "[::1]:8080", "[0:0::1]:8080" }, "http.admin_listen"},
		{"admin listen on another spelling of the wildcard", func(c *Config) { c.HTTP.Listen, c.HTTP.AdminListen = "10.0.0.1:8080", "[0::0]:8080" }, "http.admin_listen"},
		{"admin listen on another spelling of the port", func(c *Config) { c.HTTP.Listen, c.HTTP.AdminListen = "127.0.0.1:8080", "127.0.0.1:08080" }, "http.admin_listen"},
		{"admin listen on the other loopback", func(c *Config) { c.HTTP.Listen, c.HTTP.AdminListen = "127.0.0.1:8080", "[::1]:8080" }, ""},
		{"admin listen on localhost, another port", func(c *Config) { c.HTTP.Listen, c.HTTP.AdminListen = "127.0.0.1:8080", "localhost:9090" }, ""},
		{"admin listen on localhost beside another address", func(c *Config) { c.HTTP.Listen, c.HTTP.AdminListen = "10.0.0.1:8080", "localhost:8080" }, ""},
		{"admin listen on localhost at random ports", func(c *Config) { c.HTTP.Listen, c.HTTP.AdminListen = "127.0.0.1:0", "localhost:0" }, ""},
		{"empty namespace", func(c *Config) { c.XRPC.Namespace = "" }, "xrpc.namespace: must be an NSID prefix"},
		{"one-segment namespace", func(c *Config) { c.XRPC.Namespace = "appview" }, "xrpc.namespace: must be an NSID prefix"},
		{"namespace with slash", func(c *Config) { c.XRPC.Namespace = "com.example/x" }, "xrpc.namespace: must be an NSID prefix"},
		{"bad log level", func(c *Config) { c.Log.Level = "INFO" }, `log.level: "INFO": must be one of debug, info, warn, error`},
		{"bad log format", func(c *Config) { c.Log.Format = "logfmt" }, `log.format: "logfmt": must be one of text, json`},
		{"empty feed name", func(c *Config) { c.Feeds[0].Name = "" }, "feeds[0].name: \"\": must be 1 to 64"},
		{"feed name with space", func(c *Config) { c.Feeds[0].Name = "my feed" }, "feeds[0].name: \"my feed\": must be 1 to 64"},
		{"feed name starting with dash", func(c *Config) { c.Feeds[0].Name = "-x" }, "feeds[0].name"},
		{"feed name too long", func(c *Config) { c.Feeds[0].Name = strings.Repeat("a", 65) }, "feeds[0].name"},
		{"duplicate feed name", func(c *Config) { c.Feeds = append(c.Feeds, feed("other"), feed("following")) }, `feeds[2].name: duplicate of feeds[0].name "following"`},
		{"bad follow collection", func(c *Config) { c.Feeds[0].FollowCollection = "follows" }, `feeds[0].follow_collection: invalid NSID "follows"`},
		{"upper-case follow collection", func(c *Config) { c.Feeds[0].FollowCollection = "App.Bsky.graph.follow" }, `feeds[0].follow_collection: NSID "App.Bsky.graph.follow" must be written "app.bsky.graph.follow"`},
		{"negative merge limit", func(c *Config) { c.Feeds[0].MergeLimit = -1 }, "feeds[0].merge_limit: must not be negative"},
		{"no targets", func(c *Config) { c.Feeds[0].Targets = nil }, "feeds[0].targets: must list at least one target"},
		{"bad target collection", func(c *Config) { c.Feeds[0].Targets[0].Collection = "" }, "feeds[0].targets[0].collection: invalid NSID"},
		{"target is the follow collection", func(c *Config) {
			c.Feeds[0].Targets = append(c.Feeds[0].Targets, TargetConfig{Collection: "app.bsky.graph.follow", Cap: 1})
		}, "feeds[0].targets[1].collection: must differ from the feed's follow_collection"},
		{"target is another feed's follow collection", func(c *Config) {
			other := feed("follow-records")
			other.Targets = []TargetConfig{{Collection: "app.bsky.graph.follow", Cap: 1}}
			other.FollowCollection = "app.bsky.graph.listitem"
			c.Feeds = append(c.Feeds, other)
		}, `feeds[1].targets[0].collection: "app.bsky.graph.follow" is feeds[0].follow_collection; a collection cannot be both`},
		{"duplicate target", func(c *Config) {
			c.Feeds[0].Targets = append(c.Feeds[0].Targets, TargetConfig{Collection: "app.bsky.feed.post", Cap: 1})
		}, `feeds[0].targets[1].collection: duplicate of targets[0].collection "app.bsky.feed.post"`},
		{"zero cap", func(c *Config) { c.Feeds[0].Targets[0].Cap = 0 }, "feeds[0].targets[0].cap: must be positive"},
		{"negative cap", func(c *Config) { c.Feeds[0].Targets[0].Cap = -5 }, "feeds[0].targets[0].cap: must be positive"},
		{"huge cap", func(c *Config) { c.Feeds[0].Targets[0].Cap = 1 << 40 }, "feeds[0].targets[0].cap: must be at most 1000000"},
		{"fields", func(c *Config) { c.Feeds[0].Targets[0].Fields = exampleFields() }, ""},
		{"field name", func(c *Config) { c.Feeds[0].Targets[0].Fields[0].Name = "lang-s" }, `feeds[0].targets[0].fields[0].name: "lang-s": must be 1 to 32 letters`},
		{"field name starting with a digit", func(c *Config) { c.Feeds[0].Targets[0].Fields[0].Name = "1langs" }, `fields[0].name: "1langs"`},
		{"field named like a parameter", func(c *Config) { c.Feeds[0].Targets[0].Fields[0].Name = "cursor" }, `feeds[0].targets[0].fields[0].name: "cursor": parameter cursor is one of getFeed's own`},
		{"field named profiles", func(c *Config) { c.Feeds[0].Targets[0].Fields[0].Name = "profiles" }, `parameter profiles is one of getFeed's own`},
		{"field parameters collide", func(c *Config) {
			c.Feeds[0].Targets[0].Fields = append(c.Feeds[0].Targets[0].Fields, FieldConfig{Name: "createdAtMin", Path: "x", Kind: "equality"})
		}, `feeds[0].targets[0].fields[2].name: "createdAtMin": parameter createdAtMin is also made by fields[1]`},
		{"duplicate field", func(c *Config) {
			c.Feeds[0].Targets[0].Fields = append(c.Feeds[0].Targets[0].Fields, FieldConfig{Name: "langs", Path: "x", Kind: "equality"})
		}, `fields[2].name: "langs": parameter langs is also made by fields[0]`},
		{"field path", func(c *Config) { c.Feeds[0].Targets[0].Fields[0].Path = "langs[0]" }, `feeds[0].targets[0].fields[0].path: path "langs[0]"`},
		{"empty field path", func(c *Config) { c.Feeds[0].Targets[0].Fields[0].Path = "" }, `fields[0].path: path ""`},
		{"deep field path", func(c *Config) { c.Feeds[0].Targets[0].Fields[0].Path = "a.b.c.d.e.f.g.h.i" }, `fields[0].path: path "a.b.c.d.e.f.g.h.i": at most 8 segments`},
		{"field kind", func(c *Config) { c.Feeds[0].Targets[0].Fields[0].Kind = "prefix" }, `fields[0].kind: "prefix": must be equality or range`},
		{"equality with a type", func(c *Config) { c.Feeds[0].Targets[0].Fields[0].Type = "integer" }, `fields[0].type: only range fields have a type`},
		{"range without a type", func(c *Config) { c.Feeds[0].Targets[0].Fields[1].Type = "" }, `fields[1].type: "": a range field's type must be datetime or integer`},
		{"too many fields", func(c *Config) {
			for i := range 7 {
				c.Feeds[0].Targets[0].Fields = append(c.Feeds[0].Targets[0].Fields, FieldConfig{Name: fmt.Sprintf("f%d", i), Path: "x", Kind: "equality"})
			}
		}, "feeds[0].targets[0].fields: at most 8 fields per target"},
		{"too many collections", func(c *Config) {
			for i := range 100 {
				c.Feeds[0].Targets = append(c.Feeds[0].Targets, TargetConfig{Collection: fmt.Sprintf("com.example.c%d", i), Cap: 1})
			}
		}, "feeds: name 102 distinct collections; Jetstream accepts at most 100"},
		{"hydration on", func(c *Config) { c.Hydration.Profiles = true }, ""},
		{"profile collection as a target without hydration", func(c *Config) { c.Feeds[0].Targets[0].Collection = "app.bsky.actor.profile" }, ""},
		{"profile collection as a target with hydration", func(c *Config) {
			c.Hydration.Profiles = true
			c.Feeds[0].Targets[0].Collection = "app.bsky.actor.profile"
		}, "feeds[0].targets[0].collection: must not be app.bsky.actor.profile while hydration.profiles is on"},
		{"zero fetch wait", func(c *Config) { c.Hydration.FetchWait = 0 }, "hydration.fetch_wait: must be positive and at most 2s"},
		{"long fetch wait", func(c *Config) { c.Hydration.FetchWait = 3 * time.Second }, "hydration.fetch_wait: must be positive and at most 2s"},
		{"zero fetch timeout", func(c *Config) { c.Hydration.FetchTimeout = 0 }, "hydration.fetch_timeout: must be positive"},
		{"zero retry after", func(c *Config) { c.Hydration.RetryAfter = 0 }, "hydration.retry_after: must be positive"},
		{"zero hydration queue", func(c *Config) { c.Hydration.QueueSize = 0 }, "hydration.queue_size: must be between 1 and 1000000"},
		{"zero hydration concurrency", func(c *Config) { c.Hydration.Concurrency = 0 }, "hydration.concurrency: must be between 1 and 1024"},
		{"huge hydration concurrency", func(c *Config) { c.Hydration.Concurrency = 1 << 40 }, "hydration.concurrency: must be between 1 and 1024"},
		{"zero hydration per host", func(c *Config) { c.Hydration.PerHost = 0 }, "hydration.per_host: must be between 1 and 1024"},
		{"huge hydration per host", func(c *Config) { c.Hydration.PerHost = 1 << 40 }, "hydration.per_host: must be between 1 and 1024"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if strings.Contains(tt.name, "field") || strings.Contains(tt.name, "range") || strings.Contains(tt.name, "equality") {
				cfg.Feeds[0].Targets[0].Fields = exampleFields()
			}
			tt.mutate(&cfg)
			err := cfg.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.want != "" && err == nil:
				t.Fatalf("no error, want %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Fatalf("error %q lacks %q", err, tt.want)
			}
		})
	}
}

func TestValidateJoinsErrors(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Database.Path = ""
	cfg.Feeds[0].Targets[0].Cap = 0
	err := cfg.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{"database.path: must not be empty", "feeds[0].targets[0].cap: must be positive"}
	if !slices.Equal(lines, want) {
		t.Fatalf("got %q, want %q", lines, want)
	}
}

func TestCollections(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Feeds = []FeedConfig{
		{Name: "a", FollowCollection: "com.example.graph.follow", Targets: []TargetConfig{
			{Collection: "app.bsky.feed.repost"}, {Collection: "app.bsky.feed.post"},
		}},
		{Name: "b", FollowCollection: "app.bsky.graph.follow", Targets: []TargetConfig{
			{Collection: "app.bsky.feed.post"},
		}},
		{Name: "c", FollowCollection: "app.bsky.graph.follow", Targets: []TargetConfig{
			{Collection: "com.example.graph.follow"},
		}},
	}
	tests := []struct {
		name string
		got  []string
		want []string
	}{
		{"wanted", cfg.WantedCollections(), []string{"app.bsky.feed.post", "app.bsky.feed.repost", "app.bsky.graph.follow", "com.example.graph.follow"}},
		{"follow", cfg.FollowCollections(), []string{"app.bsky.graph.follow", "com.example.graph.follow"}},
		{"default wanted", DefaultConfig().WantedCollections(), []string{"app.bsky.feed.post", "app.bsky.graph.follow"}},
		{"no feeds wanted", Config{}.WantedCollections(), nil},
		{"hydration wanted", Config{Feeds: DefaultConfig().Feeds, Hydration: HydrationConfig{Profiles: true}}.WantedCollections(),
			[]string{"app.bsky.actor.profile", "app.bsky.feed.post", "app.bsky.graph.follow"}},
		{"hydration without feeds wanted", Config{Hydration: HydrationConfig{Profiles: true}}.WantedCollections(), nil},
		{"no feeds follow", Config{}.FollowCollections(), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !slices.Equal(tt.got, tt.want) {
				t.Fatalf("got %q, want %q", tt.got, tt.want)
			}
		})
	}
}

// exampleFields are the fields config.example.yaml shows (commented out).
func exampleFields() []FieldConfig {
	return []FieldConfig{
		{Name: "langs", Path: "langs", Kind: "equality"},
		{Name: "createdAt", Path: "createdAt", Kind: "range", Type: "datetime"},
	}
}

// TestParseConfigFields decodes declared fields from YAML and hands them
// to the store and the server with their kinds.
func TestParseConfigFields(t *testing.T) {
	cfg, err := ParseConfig(strings.NewReader(`
feeds:
  - name: following
    follow_collection: app.bsky.graph.follow
    targets:
      - collection: app.bsky.feed.post
        fields:
          - {name: langs, path: langs, kind: equality}
          - {name: createdAt, path: createdAt, kind: range, type: datetime}
          - {name: likes, path: stats.likes, kind: range, type: integer}
`))
	if err != nil {
		t.Fatal(err)
	}
	storeFeeds, specs := feedDefinitions(cfg)
	got := storeFeeds[0].Targets[0].Fields
	want := []feeds.Field{
		{Name: "langs", Path: "langs", Kind: feeds.FieldEquality},
		{Name: "createdAt", Path: "createdAt", Kind: feeds.FieldDatetime},
		{Name: "likes", Path: "stats.likes", Kind: feeds.FieldInteger},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("store fields %+v, want %+v", got, want)
	}
	if !reflect.DeepEqual(specs[0].Fields["app.bsky.feed.post"], want) {
		t.Fatalf("server fields %+v", specs[0].Fields)
	}

	_, err = ParseConfig(strings.NewReader(`
feeds:
  - name: following
    follow_collection: app.bsky.graph.follow
    targets:
      - collection: app.bsky.feed.post
        fields:
          - {name: langs, path: langs, kind: equality, match: any}
`))
	if err == nil || !strings.Contains(err.Error(), "feeds[0].targets[0].fields[0].match: unknown key") {
		t.Fatalf("unknown field key: %v", err)
	}
}
