package feeds

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/bluesky-social/indigo/atproto/syntax"
	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/atfeeds/appview/internal/dbpath"
	"github.com/atfeeds/appview/schema"
)

// Feed is a configured feed: the follow collection whose records say who
// follows whom, and the target collections fanned out to followers.
type Feed struct {
	Name             string
	FollowCollection syntax.NSID
	// MergeLimit is how many of a followee's newest stored targets are
	// merged into a follower's feed when the follow is created.
	MergeLimit int
	Targets    []Target
}

// Target is one collection a feed carries, with the number of items each
// viewer keeps.
type Target struct {
	Collection syntax.NSID
	Cap        int
	// Fields are the queryable fields getFeed filters this target on
	// (fields.go); their values are extracted when a record is stored.
	Fields []Field
}

// Options configures Open.
type Options struct {
	Path    string
	Feeds   []Feed
	Logger  *slog.Logger
	Metrics *Metrics
	// CacheMB is the writer's page cache; 0 means DefaultCacheMB.
	CacheMB int
	// WALPages is the WAL size, in pages, at which a commit checkpoints;
	// 0 means walAutocheckpointPages. Tests lower it.
	WALPages int
	// ReadMmapMB memory-maps up to that much of the file for the read
	// pool: page reads come straight from the OS page cache instead of a
	// pread each. 0 leaves it off. Beside a live stream it is slower: a
	// read that finds the file changed unmaps all of it and faults its
	// pages in again (docs/benchmarks.md, twenty-first round).
	ReadMmapMB int
	// RecordCacheMB bounds the record cache serving feed pages
	// (record_cache.go); 0 turns it off.
	RecordCacheMB int
	// ReadConns is the size of the read pool serving feed pages.
	ReadConns int
	// Existing opens the database for an operator command next to a
	// daemon that may be running on it: Feeds must match the feed
	// definitions the database holds (ErrFeedsDiffer), which are left as
	// they are. Opening writes the configured definitions otherwise
	// (syncLanes), and a command run with another config would disable
	// the running daemon's lanes. A database that holds none yet (a new
	// file) takes them, as the daemon would.
	//
	// For the same reason a database at an older schema version than this
	// build's is refused (ErrSchemaBehind) rather than migrated: the
	// migration would change the schema under an older daemon running on
	// it, which could then not start again on its own file. Migrate
	// upgrades it, with the daemon stopped.
	Existing bool
	// KeepSchema refuses a database at an older schema version
	// (ErrSchemaBehind) rather than migrating it, as Existing does, with
	// nothing else of Existing: the daemon sets it when an operator
	// command still has the database open, so as not to change the
	// schema under it.
	KeepSchema bool
	// IndexAll makes every account whose follows are stored a viewer of
	// every feed. Otherwise only registered viewers (those who read their
	// feed) receive fan-out, and only their follows and the targets of
	// accounts they follow are stored.
	IndexAll bool
	// Sweep configures pruning, retention and vacuum (sweep.go).
	Sweep SweepOptions
	// Profiles stores the profile records of in-scope accounts and keeps
	// their handles fresh, for profile hydration (profiles.go).
	Profiles bool
}

// Store is the daemon's SQLite database: one writer connection that applies
// batches in immediate transactions, and a separate read pool for pages, so
// readers never wait on the writer and the writer never sees
// "database is locked".
type Store struct {
	writer *sql.DB
	reader *sql.DB
	reads  *readStatements // prepared on the read pool
	// recordCache serves the records feed pages show; the writer forgets
	// the ones a commit changes before the commit (record_cache.go).
	recordCache *recordCache
	// writerOpened counts the writer connections opened; dataVersion is
	// the last data_version read on the one numbered dataVersionConn
	// (0: none read yet); both guarded by writeMu (other_writers.go).
	writerOpened    *atomic.Int64
	dataVersion     int64
	dataVersionConn int64
	// afterPageKeys, set by tests, runs between a page's two reads.
	afterPageKeys func()
	// afterCommit, set by tests, runs after a write transaction's commit,
	// before the record cache is told the commit is done.
	afterCommit func()
	// syncRunsKept bounds sync_runs (SyncRunsKept; tests lower it).
	syncRunsKept int
	path         string // of the database file; its WAL is path + "-wal"
	// walPages is the writer's wal_autocheckpoint on a live stream
	// (wal.go); walBacklog says the writer connection walConn (its count
	// in writerOpened) has it at walBacklogFactor times that, for a
	// backlog's batches (setWALMode; writer state, under writeMu).
	walPages   int
	walBacklog bool
	walConn    int64
	// walRetryFrames is the WAL length, in frames, below which a RESTART
	// that could not complete is not tried again (boundWAL; writer state,
	// under writeMu).
	walRetryFrames int64
	// walEmptied is the WAL generation the last completed RESTART emptied
	// (boundWAL; writer state, under writeMu).
	walEmptied walGeneration
	log        *slog.Logger
	metrics    *Metrics

	lanes         []lane
	laneByKey     map[laneKey]*lane
	followColls   map[syntax.NSID]int64 // follow collection → collection id
	targetColls   map[syntax.NSID]int64 // target collection → collection id
	lanesByFollow map[int64][]*lane     // follow collection id → lanes it feeds
	fieldsByColl  map[int64][]fieldDef  // target collection id → fields extracted at ingest

	// fanoutRowBound bounds the rows one fan-out statement sorts
	// (fanout_chunks.go); tests lower it.
	fanoutRowBound int64
	indexAll       bool
	// lanesAtOpen is, in a store opened with Options.Existing, the lane
	// definitions it loaded (laneRowsSQL); "" otherwise (checkLanes).
	lanesAtOpen string
	// audienceImplied: the stored follows are the fan-out's audience, no
	// per-row viewer check needed (audience.go). Decided at Open.
	audienceImplied bool
	profiles        bool // profile hydration: store profile records

	// writeMu serialises every write transaction and guards the writer's
	// in-memory state (actorIDs, stmts). SQLite has one writer anyway;
	// queueing here rather than on the busy timeout keeps it fair and
	// avoids "database is locked".
	writeMu sync.Mutex
	// writersWaiting counts the urgent writers waiting for writeMu
	// (lockWriter): a catch-up's open batch commits once its current
	// part is applied when one is (WriterWanted).
	writersWaiting atomic.Int32

	// actorIDs caches interned DIDs for the writer. Only committed ids
	// enter it, so a rolled-back batch cannot leave a dangling id behind.
	actorIDs didIDs
	// followed caches authors a viewer follows (followed_cache.go).
	followed followedAuthors
	stmts    *statements // prepared on the writer at the first batch

	mu         sync.Mutex
	cursor     StreamCursor // last committed stream cursor
	generation int64        // of the stream cursor; bumped by a reset
	scope      string       // wanted collections the cursor is taken under (CheckScope)

	sweep sweeper // prune sweep state, guarded by writeMu (sweep.go)
	// fieldBacklog lists declared fields whose stored records still need
	// extracting, guarded by writeMu (fields_store.go).
	fieldBacklog []*fieldBacklog
	backlogSlice int // records one backlog slice examines (fieldBacklogSlice)
	backlogBytes int // record bytes one backlog slice reads (fieldBacklogBytes)

	viewers *viewerSet // registered viewers, in memory (viewer_set.go)
	// viewerIDs are the actor ids of the viewers pages were read for
	// (viewer_ids.go).
	viewerIDs viewerIDs
	// viewerVersion is the viewer_set_version the set holds.
	viewerVersion atomic.Int64
	// identities orders identity events against profile fetches.
	identities identityLog
	// gaps: the newest gap this store knows of, and who to tell of a new
	// one (OnGap).
	gaps gapWatch
	// afterClose runs once Close has closed the database (AfterClose).
	afterClose []func()
}

// lane is one (feed, target collection) pair: the unit that holds items and
// has a cap.
type lane struct {
	id               int64
	feed             string
	collection       syntax.NSID
	collectionID     int64
	followCollection syntax.NSID
	followCollID     int64
	cap              int
	mergeLimit       int
	fields           map[string]laneField // declared name → extraction
}

// laneField is a field a lane may be filtered on.
type laneField struct {
	id   int64
	kind FieldKind
}

type laneKey struct {
	feed       string
	collection syntax.NSID
}

// DefaultCacheMB is the writer's page cache when Options leave it unset:
// the feed table at 10,000 viewers (58 MiB) and the records indexes'
// newest pages. 88 MiB, the 24 MiB the read connections gave up
// (readerCacheMB), ingested 19% faster than 64, and its last tenth 30-40%
// faster, for the same page slab (docs/benchmarks.md, fifteenth round).
const DefaultCacheMB = 88

// readerCacheMB is the page cache of each read connection, and
// defaultReadConns the size of the read pool when Options leave it unset.
//
// A read connection's cache is small because it does not last: in WAL
// mode SQLite empties it at the start of any read transaction that finds
// the database changed, and a live stream commits a batch every 100 ms.
// It holds what one page read touches twice (the b-trees' upper levels)
// and little more. 2 MiB served getFeed as 8 MiB did, and the 24 MiB went
// to the writer, whose cache lasts (DefaultCacheMB; docs/benchmarks.md,
// fifteenth round). The record cache is what lasts across commits.
const (
	readerCacheMB    = 2
	defaultReadConns = 4
)

// tempCacheMB allows for the pages of the writer's in-memory temp tables
// (the pending fan-out of a batch), which live in the page cache too.
const tempCacheMB = 8

func (o Options) withDefaults() Options {
	if o.ReadConns <= 0 {
		o.ReadConns = defaultReadConns
	}
	if o.CacheMB <= 0 {
		o.CacheMB = DefaultCacheMB
	}
	return o
}

// PageCacheMB is what the Store's page caches hold together when full:
// the writer's, each read connection's, and the writer's temp tables. It
// sizes the page slab (ReservePageSlab).
func (o Options) PageCacheMB() int {
	o = o.withDefaults()
	return o.CacheMB + o.ReadConns*readerCacheMB + tempCacheMB
}

// walAutocheckpointPages is how large the WAL grows (in 4 KiB pages) before
// a commit folds it back into the database, on a live stream. SQLite's
// default of 1,000 (4 MB) is less than one catch-up batch writes, so every
// commit paid for a checkpoint; at 16,384 (64 MiB) a feed page rewritten by
// several live batches in a row is copied to the database file once.
// A backlog's batches let it grow further (walBacklogFactor).
const walAutocheckpointPages = 16384

// walBacklogFactor is how far past walAutocheckpointPages the WAL grows
// while a backlog is applied (Batch.Backlog): four times, 256 MiB. A catch-up
// batch of 30,000 events (the default then) rewrites most of the feed table (some 15,000
// pages at 10,000 viewers), so at the live threshold nearly every such
// commit checkpointed what it had just written; at four times it, a page
// rewritten by the four or so batches between checkpoints is copied once.
// That took the checkpoints from 8.3 to 4.3 µs of the writer's time an
// event and made a 1M catch-up 7–16% faster, with no more RSS (the WAL is
// a file; its index in shared memory takes 32 KiB per 4,096 frames, 512
// KiB at this size, by SQLite's file format). A live
// stream keeps the live threshold: readers look a page up in every block
// of the WAL's index not yet checkpointed, and getFeed read 13% slower
// after a catch-up that left the WAL large in two of three pairs (2%
// faster in the third; docs/benchmarks.md, twenty-fourth round). The
// first live batch after a backlog checkpoints it, and the file is cut
// back to the live bound (journal_size_limit) when the WAL next rewinds.
const walBacklogFactor = 4

// maxCachedActors bounds the writer's DID cache; past it the cache starts
// over rather than growing with the network.
const maxCachedActors = 500_000

// maxCachedActorBytes bounds the same cache in bytes: a follow's subject
// is whatever DID its author wrote, up to 2 KiB, so 500,000 of them held a
// GiB; 500,000 did:plc DIDs (32 bytes) still fit.
const maxCachedActorBytes = 48 << 20

// ErrUnknownLane is returned for a feed or collection the config does not
// declare.
var ErrUnknownLane = errors.New("unknown feed or collection")

// Open opens (creating if needed) the database at opts.Path, applies the
// schema migrations and syncs the configured feeds into lanes.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	opts = opts.withDefaults()
	if opts.WALPages <= 0 {
		opts.WALPages = walAutocheckpointPages
	}
	// journal_size_limit truncates the WAL file when it rewinds, so after
	// a burst the file shrinks back to the RESTART threshold (wal.go).
	writerDSN := dsn(opts.Path, false) +
		fmt.Sprintf("&_pragma=cache_size(%d)&_pragma=wal_autocheckpoint(%d)&_pragma=journal_size_limit(%d)",
			-opts.CacheMB*1024, opts.WALPages, walSizeLimit(opts.WALPages))
	if opts.Sweep.IncrementalVacuum {
		// Takes effect only on a new file, before the first table.
		writerDSN += "&_pragma=auto_vacuum(incremental)"
	}
	writerOpened := new(atomic.Int64)
	writer := sql.OpenDB(writerConnector(writerDSN, writerOpened))
	writer.SetMaxOpenConns(1)
	writer.SetMaxIdleConns(1)
	writer.SetConnMaxLifetime(0)
	writer.SetConnMaxIdleTime(0)
	s := &Store{
		path:           dbpath.Resolve(opts.Path), // where SQLite keeps the file, and so its WAL
		walPages:       opts.WALPages,
		writer:         writer,
		writerOpened:   writerOpened,
		log:            opts.Logger.With("component", "feeds"),
		syncRunsKept:   SyncRunsKept,
		metrics:        opts.Metrics,
		laneByKey:      map[laneKey]*lane{},
		followColls:    map[syntax.NSID]int64{},
		targetColls:    map[syntax.NSID]int64{},
		lanesByFollow:  map[int64][]*lane{},
		fieldsByColl:   map[int64][]fieldDef{},
		actorIDs:       newDIDIDs(maxCachedActors, maxCachedActorBytes),
		viewerIDs:      viewerIDs{ids: newDIDIDs(maxViewerIDs, maxViewerIDBytes)},
		followed:       followedAuthors{},
		indexAll:       opts.IndexAll,
		profiles:       opts.Profiles,
		sweep:          sweeper{opts: opts.Sweep.withDefaults(), probeBudget: retentionProbeBudget},
		backlogSlice:   fieldBacklogSlice,
		backlogBytes:   fieldBacklogBytes,
		fanoutRowBound: maxSortedFanoutRows,
		viewers:        newViewerSet(),
		recordCache:    newRecordCache(int64(opts.RecordCacheMB) << 20),
	}
	if s.recordCache != nil {
		s.recordCache.sized = s.metrics.recordCacheSized()
	}
	if err := s.init(ctx, opts); err != nil {
		writer.Close()
		if isBusy(err) {
			// Another process (an operator command) held the write lock
			// past the busy timeout; the caller may try again.
			err = fmt.Errorf("%w: %w", ErrWriteBusy, err)
		}
		return nil, err
	}
	// The writer's data_version is read once before any page can fill the
	// record cache: a first reading taken later, at the first transaction
	// or idle tick, would be the baseline, and another process's commit
	// before it would never be noticed, leaving records cached before
	// that commit served as they were (other_writers.go,
	// TestTheRecordCacheForgetsWhatAnotherProcessChanged, "after a restart").
	if err := s.noticeOtherWriters(ctx, s.writer); err != nil {
		writer.Close()
		return nil, err
	}
	readerDSN := dsn(opts.Path, true)
	if opts.ReadMmapMB > 0 {
		readerDSN += fmt.Sprintf("&_pragma=mmap_size(%d)", int64(opts.ReadMmapMB)<<20)
	}
	reader, err := sql.Open("sqlite", readerDSN)
	if err != nil {
		writer.Close()
		return nil, fmt.Errorf("open read pool: %w", err)
	}
	reader.SetMaxOpenConns(opts.ReadConns)
	reader.SetMaxIdleConns(opts.ReadConns)
	s.reader = reader
	if s.reads, err = prepareReads(ctx, reader); err != nil {
		reader.Close()
		writer.Close()
		return nil, err
	}
	return s, nil
}

// dsn puts every pragma in the connection string so each pooled connection
// gets it; a PRAGMA run on a pool reaches one connection only.
func dsn(path string, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeoutMS))
	q.Add("_pragma", "journal_mode(wal)")
	q.Add("_pragma", "synchronous(normal)")
	q.Add("_pragma", "foreign_keys(on)")
	q.Add("_pragma", "temp_store(memory)")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
		q.Add("_pragma", fmt.Sprintf("cache_size(%d)", -readerCacheMB*1024))
	} else {
		q.Set("_txlock", "immediate")
	}
	return "file:" + uriPath(path) + "?" + q.Encode()
}

// uriPath escapes the characters an SQLite URI filename reads as syntax:
// '?' would start the query (dropping the first pragma), '#' a fragment,
// and '%' an escape, so "a#b.db" opened a file named "a"
// (TestDatabasePathIsTheFileOpened).
func uriPath(path string) string {
	return strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
}

// busyTimeoutMS is how long a connection waits for a lock held by
// another.
const busyTimeoutMS = 5000

func (s *Store) init(ctx context.Context, opts Options) error {
	var mode string
	if err := s.writer.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("read journal mode: %w", err)
	}
	if mode != "wal" {
		return fmt.Errorf("open database: journal_mode is %q, want wal (is the file on a filesystem without shared memory?)", mode)
	}
	if opts.Existing || opts.KeepSchema {
		if err := refuseOlderSchema(ctx, s.writer); err != nil {
			return err
		}
	}
	if err := schema.Migrate(ctx, s.writer); err != nil {
		return fmt.Errorf("migrate database: %w", err)
	}
	if err := s.syncLanes(ctx, opts.Feeds, opts.Existing); err != nil {
		return fmt.Errorf("sync feeds: %w", err)
	}
	if err := s.loadViewers(ctx, s.writer); err != nil {
		return err
	}
	if err := s.checkAudience(ctx); err != nil {
		return err
	}
	cur, gen, err := s.loadCursor(ctx)
	if err != nil {
		return err
	}
	s.cursor, s.generation = cur, gen
	if err := s.writer.QueryRowContext(ctx, `SELECT coalesce(max(id), 0) FROM gaps`).Scan(&s.gaps.lastID); err != nil {
		return fmt.Errorf("read gaps: %w", err)
	}
	return nil
}

// Close closes both pools. The caller stops writing first.
func (s *Store) Close() error {
	var errs []error
	if s.reader != nil {
		errs = append(errs, s.reader.Close())
	}
	errs = append(errs, s.writer.Close())
	for _, f := range s.afterClose {
		f()
	}
	s.afterClose = nil
	return errors.Join(errs...)
}

// AfterClose has Close call f once the database is closed: a lock its
// opener holds for as long as the store is open is dropped with it. Not
// safe to call concurrently with Close.
func (s *Store) AfterClose(f func()) {
	s.afterClose = append(s.afterClose, f)
}

// Checkpoint folds the WAL back into the database file, so a stopped daemon
// leaves one self-contained file behind.
func (s *Store) Checkpoint(ctx context.Context) error {
	if _, err := s.writer.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}
