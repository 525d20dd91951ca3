package appview

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/jetstream"
)

// Config is the whole configuration of the daemon. Start from
// DefaultConfig; a YAML file only overrides the keys it names.
type Config struct {
	Database  DatabaseConfig  `yaml:"database"`
	Jetstream JetstreamConfig `yaml:"jetstream"`
	Ingest    IngestConfig    `yaml:"ingest"`
	HTTP      HTTPConfig      `yaml:"http"`
	XRPC      XRPCConfig      `yaml:"xrpc"`
	Notify    NotifyConfig    `yaml:"notify"`
	Log       LogConfig       `yaml:"log"`
	Identity  IdentityConfig  `yaml:"identity"`
	Backfill  BackfillConfig  `yaml:"backfill"`
	Sweep     SweepConfig     `yaml:"sweep"`
	Hydration HydrationConfig `yaml:"hydration"`
	Memory    MemoryConfig    `yaml:"memory"`
	// Feeds replaces the default list as a whole when the file names it.
	// An empty list is valid: the daemon then fans nothing out.
	Feeds []FeedConfig `yaml:"feeds"`
}

// DatabaseConfig locates the SQLite database.
type DatabaseConfig struct {
	Path string `yaml:"path"`
	// CacheMB is the writer connection's page cache. Ingest dirties the
	// feeds of every viewer a batch reaches, so a cache that holds the
	// hot part of feed_items saves reading pages back from the file
	// (docs/benchmarks.md). Each of the read connections has its own,
	// smaller cache. The daemon puts all the caches in one slab reserved
	// at start (feeds.ReservePageSlab), resident from then on: allocated
	// page by page, each would cost twice its size in RSS.
	CacheMB int `yaml:"cache_mb"`
	// ReadMmapMB memory-maps up to that much of the database for the read
	// connections serving getFeed (0: off). Mapped pages the reads touch
	// count toward the daemon's RSS, though the kernel can drop them.
	ReadMmapMB int `yaml:"read_mmap_mb"`
	// RecordCacheMB bounds the in-memory cache of the records getFeed
	// pages show (0: off). The newest posts of followed accounts are on
	// many viewers' first pages, so most of a page comes from it instead
	// of a b-tree descent and a pread per item.
	RecordCacheMB int `yaml:"record_cache_mb"`
}

// JetstreamConfig describes the upstream firehose connection.
type JetstreamConfig struct {
	// URLs are tried in order; the consumer moves to the next one when a
	// connection fails.
	URLs []string `yaml:"urls"`
	// Rewind is subtracted from the stored cursor on reconnect: delivery
	// is at-least-once and every write is idempotent. Zero takes the
	// consumer's default (EffectiveRewind). A failover to another host
	// rewinds at least the decoder's clock skew allowance instead.
	Rewind time.Duration `yaml:"rewind"`
	// Compression asks for permessage-deflate websocket compression.
	Compression   bool          `yaml:"compression"`
	MaxFrameBytes int64         `yaml:"max_frame_bytes"`
	ReadTimeout   time.Duration `yaml:"read_timeout"`
	// IdleTimeout moves to the next URL when no event arrives for this
	// long though the host's pings keep the connection open: Jetstream
	// sends identity and account events whatever the filter, so on the
	// real network silence is a stalled host. Zero never does.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// QueueSize bounds the channel between the read loop and the writer.
	// A catch-up batch grows only while events are queued, so the queue
	// must hold a good part of one (docs/benchmarks.md).
	QueueSize int `yaml:"queue_size"`
	// RetentionWindow is how far back the upstream replays (Jetstream
	// keeps about 36 h). A stored cursor older than that at reconnect is
	// a gap: recorded, counted, and its viewers rebuilt on their next read.
	RetentionWindow time.Duration `yaml:"retention_window"`
}

// EffectiveRewind is the rewind the consumer uses: jetstream.rewind, or
// the consumer's default where it is zero (a reconnect always rewinds a
// little, as delivery is not in time order across accounts).
func (js JetstreamConfig) EffectiveRewind() time.Duration {
	if js.Rewind <= 0 {
		return jetstream.DefaultRewind
	}
	return js.Rewind
}

// FailoverRewind is the rewind of a failover to another host: at least
// the clock skew the consumer allows a host's stamps, since the stored
// position came from another clock (jetstream.Client.resumeFrom).
func (js JetstreamConfig) FailoverRewind() time.Duration {
	return max(js.EffectiveRewind(), jetstream.DefaultMaxClockSkew)
}

// IngestConfig describes how events are batched into transactions. A live
// batch is flushed at BatchSize events or after BatchInterval, whichever
// comes first; while events are queued (a catch-up) it grows to
// CatchupBatchSize, and a busy writer stretches the interval up to
// MaxBatchInterval.
type IngestConfig struct {
	BatchSize     int           `yaml:"batch_size"`
	BatchInterval time.Duration `yaml:"batch_interval"`
	// MaxBatchInterval is how far a live batch's wait may stretch past
	// BatchInterval while the writer is busy: each wait is ten times
	// what the last batch took to apply (ingester.waitAfter), so a
	// quiet stream keeps BatchInterval's latency and a heavy one commits
	// fewer, larger batches, which write each feed page once for many
	// rows and leave the readers' caches alone for longer. At or below
	// BatchInterval no batch stretches.
	MaxBatchInterval time.Duration `yaml:"max_batch_interval"`
	// CatchupBatchSize lets a batch grow past BatchSize while more events
	// are already queued (the consumer is catching up on a backlog): one
	// commit then writes each touched page once for many more events.
	// It also bounds a live batch whose wait MaxBatchInterval stretched,
	// which no longer stops at BatchSize. At or below BatchSize (0
	// included) turns growth off. A backlog's batch is applied to its
	// transaction in parts of about a second's work (8,192 events at
	// most) as they are taken off the queue, and committed once (after
	// 10 s open at most, or at the change being applied when a first read
	// waits to write): the batch holds no more than a part in memory, and
	// the consumer's read loop waits on a part at a time.
	CatchupBatchSize int `yaml:"catchup_batch_size"`
	// IndexAll makes every account whose follows are stored a viewer.
	IndexAll bool `yaml:"index_all"`
}

// XRPCConfig names the served methods and bounds what clients may ask
// of them.
type XRPCConfig struct {
	// Namespace is the NSID prefix of the methods: Namespace+".getFeed"
	// is served.
	Namespace string `yaml:"namespace"`
	// HandleLookups bounds getFeed's lookups of actors given as handles.
	HandleLookups HandleLookupsConfig `yaml:"handle_lookups"`
}

// LogConfig describes the slog handler.
type LogConfig struct {
	Level  string `yaml:"level"`  // debug, info, warn or error
	Format string `yaml:"format"` // text or json
}

// FeedConfig is one feed: who follows whom (FollowCollection, whose
// records name the followed DID in $.subject) and which records of the
// followed accounts land in the follower's feed (Targets).
type FeedConfig struct {
	// Name is the feed's name in requests; URL-safe and unique.
	Name             string `yaml:"name"`
	FollowCollection string `yaml:"follow_collection"`
	// MergeLimit is how many of a followee's newest stored targets are
	// merged into the follower's feed on a new follow; 0 merges none.
	// Defaults to 100 when a feed in the file omits it.
	MergeLimit int            `yaml:"merge_limit"`
	Targets    []TargetConfig `yaml:"targets"`
}

// TargetConfig is one collection fanned out into a feed.
type TargetConfig struct {
	Collection string `yaml:"collection"`
	// Cap is how many items of this collection a viewer's feed keeps.
	// Defaults to 200 when a target in the file omits it.
	Cap int `yaml:"cap"`
	// Fields are the queryable fields getFeed may filter this collection
	// on (config_fields.go). None by default.
	Fields []FieldConfig `yaml:"fields,omitempty"`
}

const (
	defaultMergeLimit = 100
	defaultTargetCap  = 200
	// maxTargetCap bounds a feed's cap: far above any timeline, and low
	// enough that the sweep's pace arithmetic (a visit per cap/4 rows,
	// times sweep.actors and a catch-up batch's events) cannot overflow.
	maxTargetCap = 1_000_000
)

// DefaultConfig returns the configuration used when no file is given. Each
// call returns fresh slices, so callers may modify the result.
func DefaultConfig() Config {
	return Config{
		Database: DatabaseConfig{Path: "./appview.db", CacheMB: feeds.DefaultCacheMB, RecordCacheMB: 32},
		Jetstream: JetstreamConfig{
			URLs: []string{
				"wss://jetstream2.us-east.bsky.network/subscribe",
				"wss://jetstream1.us-east.bsky.network/subscribe",
				"wss://jetstream1.us-west.bsky.network/subscribe",
				"wss://jetstream2.us-west.bsky.network/subscribe",
			},
			Rewind:          5 * time.Second,
			Compression:     true,
			MaxFrameBytes:   1 << 20,
			ReadTimeout:     60 * time.Second,
			IdleTimeout:     5 * time.Minute,
			QueueSize:       16384,
			RetentionWindow: 36 * time.Hour,
		},
		Ingest: IngestConfig{
			BatchSize:        1000,
			BatchInterval:    100 * time.Millisecond,
			MaxBatchInterval: 5 * time.Second,
			CatchupBatchSize: 60000,
			IndexAll:         false,
		},
		HTTP:      HTTPConfig{Listen: ":8080", TrustedProxies: []string{}},
		XRPC:      XRPCConfig{Namespace: "com.example.appview", HandleLookups: defaultHandleLookups()},
		Log:       LogConfig{Level: "info", Format: "text"},
		Identity:  defaultIdentityConfig(),
		Backfill:  defaultBackfillConfig(),
		Sweep:     defaultSweepConfig(),
		Hydration: defaultHydrationConfig(),
		Feeds: []FeedConfig{{
			Name:             "following",
			FollowCollection: "app.bsky.graph.follow",
			MergeLimit:       defaultMergeLimit,
			Targets: []TargetConfig{{
				Collection: "app.bsky.feed.post",
				Cap:        defaultTargetCap,
			}},
		}},
	}
}

// LoadConfig reads the YAML file at path with ParseConfig. An empty path
// means DefaultConfig.
func LoadConfig(path string) (Config, error) {
	if path == "" {
		return DefaultConfig(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	cfg, err := ParseConfig(bytes.NewReader(data))
	if err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig decodes one YAML document over DefaultConfig and validates
// the result. Keys left out keep their defaults; an empty document is the
// default configuration. Unknown keys, empty (null) values and durations
// without a unit ("5" instead of "5s") are errors that name the key.
func ParseConfig(r io.Reader) (Config, error) {
	cfg, err := decodeConfig(r)
	if err != nil {
		return Config{}, err
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// decodeConfig is ParseConfig without the validation, so that the
// environment can still be applied before Validate (LoadConfigEnv).
func decodeConfig(r io.Reader) (Config, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}

	// First pass: the node tree, checked against the struct for unknown
	// keys, nulls and unit-less durations, so errors carry the full key
	// path instead of a Go type name.
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return DefaultConfig(), nil
		}
		return Config{}, fmt.Errorf("parse config: %w", err)
	}
	switch err := dec.Decode(new(yaml.Node)); {
	case err == nil:
		return Config{}, errors.New("parse config: more than one YAML document")
	case !errors.Is(err, io.EOF):
		return Config{}, fmt.Errorf("parse config: %w", err)
	}
	if err := checkDocument(&doc, reflect.TypeFor[Config]()); err != nil {
		return Config{}, err
	}

	// Second pass: the real decode, still strict as a backstop.
	cfg := DefaultConfig()
	dec = yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("decode config: %w", err)
	}
	return cfg, nil
}

// UnmarshalYAML decodes a feed, defaulting an omitted merge_limit. It
// uses the callback form on purpose: the callback keeps the outer
// decoder's KnownFields setting, yaml.Node.Decode would drop it.
func (f *FeedConfig) UnmarshalYAML(unmarshal func(any) error) error {
	type plain FeedConfig // no methods, so no recursion
	p := plain{MergeLimit: defaultMergeLimit}
	if err := unmarshal(&p); err != nil {
		return err
	}
	*f = FeedConfig(p)
	return nil
}

// UnmarshalYAML decodes a target, defaulting an omitted cap; an explicit
// cap of 0 stays 0 and fails validation.
func (t *TargetConfig) UnmarshalYAML(unmarshal func(any) error) error {
	type plain TargetConfig
	p := plain{Cap: defaultTargetCap}
	if err := unmarshal(&p); err != nil {
		return err
	}
	*t = TargetConfig(p)
	return nil
}

// WantedCollections returns the sorted union of every feed's follow and
// target collections, and the profile collection when profile hydration
// is on: what the Jetstream subscription must ask for. It is empty when
// there are no feeds; Jetstream reads an empty wantedCollections as
// "everything", so do not subscribe with it as is.
func (c Config) WantedCollections() []string {
	var out []string
	for _, f := range c.Feeds {
		out = append(out, f.FollowCollection)
		for _, t := range f.Targets {
			out = append(out, t.Collection)
		}
	}
	if len(out) > 0 && c.Hydration.Profiles {
		out = append(out, string(feeds.ProfileCollection))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// FollowCollections returns the sorted, de-duplicated follow collections
// of all feeds.
func (c Config) FollowCollections() []string {
	var out []string
	for _, f := range c.Feeds {
		out = append(out, f.FollowCollection)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
