package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver, for dbstat
)

func numCPU() int { return runtime.GOMAXPROCS(0) }

// procStatus reads a size field of /proc/self/status ("VmHWM", "VmRSS")
// in bytes; 0 where there is no /proc.
func procStatus(field string) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// resetPeakRSS starts VmHWM over from the current RSS (Linux ≥ 4.0), so
// the peak of a phase does not include the one before. It says so when
// the reset did not happen (an older kernel, a restricted container), and
// the peak printed then includes the phases before.
func resetPeakRSS() error {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return fmt.Errorf("peak RSS not reset: %w", err)
	}
	// Right after a reset the peak is the current RSS, give or take what
	// the process touched between the two reads.
	if hwm, rss := procStatus("VmHWM"), procStatus("VmRSS"); hwm == 0 || hwm > rss+16<<20 {
		return fmt.Errorf("peak RSS not reset: VmHWM %d MiB against VmRSS %d MiB", hwm>>20, rss>>20)
	}
	return nil
}

// metrics is one scrape of the daemon's /metrics, keyed by the sample's
// name and labels as written ("name{label=\"v\"}").
type metrics map[string]float64

func scrape(ctx context.Context, base string) (metrics, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape metrics: %w", err)
	}
	defer res.Body.Close()
	m := metrics{}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			m[line[:i]] = v
		}
	}
	return m, sc.Err()
}

// sum adds the samples whose key starts with prefix: a metric name sums
// over its labels, a full key is one sample.
func (m metrics) sum(prefix string) float64 {
	var s float64
	for k, v := range m {
		if k == prefix || strings.HasPrefix(k, prefix+"{") {
			s += v
		}
	}
	return s
}

// bucket is a histogram's cumulative count at le for the series whose
// labels mention method (a substring of its method label).
func (m metrics) bucket(name, method, le string) float64 {
	var s float64
	for k, v := range m {
		if strings.HasPrefix(k, name+"{") && strings.Contains(k, method) && strings.Contains(k, `le="`+le+`"`) {
			s += v
		}
	}
	return s
}

// logCounter counts the daemon's warnings and errors, and those that
// mention a locked database, which must never happen.
type logCounter struct {
	slog.Handler
	warnings *atomic.Int64
	locked   *atomic.Int64
}

func newLogCounter(h slog.Handler) *logCounter {
	return &logCounter{Handler: h, warnings: new(atomic.Int64), locked: new(atomic.Int64)}
}

// Enabled lets warnings through to be counted even when the handler
// below prints only errors.
func (l *logCounter) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= slog.LevelWarn || l.Handler.Enabled(ctx, level)
}

func (l *logCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		l.warnings.Add(1)
		text := r.Message
		r.Attrs(func(a slog.Attr) bool {
			text += " " + a.Value.String()
			return true
		})
		if strings.Contains(text, "locked") {
			l.locked.Add(1)
		}
	}
	if !l.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return l.Handler.Handle(ctx, r)
}

func (l *logCounter) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logCounter{Handler: l.Handler.WithAttrs(attrs), warnings: l.warnings, locked: l.locked}
}

func (l *logCounter) WithGroup(name string) slog.Handler {
	return &logCounter{Handler: l.Handler.WithGroup(name), warnings: l.warnings, locked: l.locked}
}

// reportStorage prints bytes per feed item: the pages of feed_items and
// of every index on it, from SQLite's dbstat virtual table (modernc's
// build has SQLITE_ENABLE_DBSTAT_VTAB), over the number of rows.
func (b *bench) reportStorage(ctx context.Context) error {
	start := time.Now()
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "query_only(1)")
	db, err := sql.Open("sqlite", "file:"+b.dbPath+"?"+q.Encode())
	if err != nil {
		return err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT name FROM sqlite_schema WHERE tbl_name = 'feed_items' AND type IN ('table', 'index') ORDER BY type DESC, name`)
	if err != nil {
		return fmt.Errorf("list feed_items btrees: %w", err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return err
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	var items int64
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM feed_items`).Scan(&items); err != nil {
		return fmt.Errorf("count feed items: %w", err)
	}
	var total int64
	var parts bytes.Buffer
	for _, n := range names {
		var size, payload int64
		err := db.QueryRowContext(ctx, `SELECT SUM(pgsize), SUM(payload) FROM dbstat WHERE name = ? AND aggregate = TRUE`, n).Scan(&size, &payload)
		if err != nil {
			return fmt.Errorf("dbstat %s: %w", n, err)
		}
		total += size
		fmt.Fprintf(&parts, "  %-24s %8.1f MiB  %6.1f bytes/item (payload %.1f)\n", n, float64(size)/(1<<20), float64(size)/float64(max(items, 1)), float64(payload)/float64(max(items, 1)))
	}
	var dbBytes int64
	if err := db.QueryRowContext(ctx, `SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()`).Scan(&dbBytes); err != nil {
		return fmt.Errorf("database size: %w", err)
	}
	fmt.Fprintf(b.out, "\nstorage: %d feed items, %.1f bytes per feed item (feed_items and its indexes, dbstat); database %.0f MiB [%.1fs]\n",
		items, float64(total)/float64(max(items, 1)), float64(dbBytes)/(1<<20), time.Since(start).Seconds())
	io.Copy(b.out, &parts)
	return nil
}
