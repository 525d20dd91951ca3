package crashtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/atfeeds/appview/jetstream/jetstreamtest"
)

// Harness runs the daemon against a fake Jetstream over one database,
// stopping and restarting it, and checks the database after every stop.
type Harness struct {
	Log    *Log
	Model  *Model
	Server *jetstreamtest.Server
	Bin    string
	Dir    string
	DBPath string
	// Env is added to every run's environment (batch interval, rewind…).
	Env []string
	// Pace is how long a run takes to append its share of the log.
	Pace time.Duration
	// MaxStopAfter bounds the random moment of a kill or SIGTERM.
	MaxStopAfter time.Duration
	Logf         func(format string, args ...any)

	rng      *rand.Rand
	appended int
	runs     int
	cfgPath  string
	// readDriven runs the daemon without index_all (CatchUpReadHarness).
	readDriven bool
	// Landed counts how each run ended, by Stop (a failpoint that was
	// not reached in time counts under "failpoint missed").
	Landed  map[Stop]int
	Cursors []int64 // the stored cursor after every stop

	poll cursorPoller
}

// NewHarness prepares a harness in dir; call Close when done.
func NewHarness(l *Log, bin, dir string, seed uint64) (*Harness, error) {
	h := &Harness{
		Log: l, Model: NewModel(l), Server: jetstreamtest.NewServer(), Bin: bin, Dir: dir,
		DBPath: filepath.Join(dir, "appview.db"), cfgPath: filepath.Join(dir, "config.yaml"),
		Pace: time.Second, MaxStopAfter: 1200 * time.Millisecond,
		Logf: func(string, ...any) {}, rng: rand.New(rand.NewPCG(seed, 1)), Landed: map[Stop]int{},
	}
	if err := os.WriteFile(h.cfgPath, []byte(ConfigYAML), 0o644); err != nil {
		return nil, err
	}
	return h, nil
}

// Close stops the fake server.
func (h *Harness) Close() { h.Server.Close() }

// Poll reads the stored cursor every interval until ctx ends, whether the
// daemon runs or not, and records any read lower than one before it.
func (h *Harness) Poll(ctx context.Context, interval time.Duration) {
	var highest int64
	h.poll.run(ctx, interval, func() ([]string, error) {
		c, err := ReadCursor(ctx, h.DBPath)
		if err != nil {
			return nil, err
		}
		var back []string
		if c < highest {
			back = append(back, fmt.Sprintf("%d after %d", c, highest))
		}
		highest = max(highest, c)
		return back, nil
	})
}

// Polled returns how many cursor reads Poll made and the ones that went
// back.
func (h *Harness) Polled() (int, []string) { return h.poll.polled() }

// start runs the daemon once; extra is added to the environment.
func (h *Harness) start(extra ...string) (*Process, error) {
	env := append([]string{
		"APPVIEW_DATABASE_PATH=" + h.DBPath,
		"APPVIEW_JETSTREAM_URLS=" + h.Server.URL(),
		fmt.Sprintf("APPVIEW_INGEST_INDEX_ALL=%t", !h.readDriven),
	}, h.Env...)
	env = append(env, extra...)
	h.runs++
	return StartServe(h.Bin, h.cfgPath, filepath.Join(h.Dir, fmt.Sprintf("run-%03d.log", h.runs)), env)
}

// appendUpTo appends log frames up to index n (exclusive).
func (h *Harness) appendUpTo(n int) {
	n = min(n, len(h.Log.Frames))
	if n <= h.appended {
		return
	}
	data := make([][]byte, 0, n-h.appended)
	for _, f := range h.Log.Frames[h.appended:n] {
		data = append(data, f.Data)
	}
	h.Server.Append(data...)
	h.appended = n
}

// pace appends frames up to n in even steps over d, as a live stream
// arrives, and returns when all are appended.
func (h *Harness) pace(n int, d time.Duration) {
	const steps = 20
	from := h.appended
	for i := 1; i <= steps; i++ {
		h.appendUpTo(from + (n-from)*i/steps)
		time.Sleep(d / steps)
	}
}

// First starts the daemon on an empty database, streams the seed graph,
// waits until all of it is committed and kills the daemon. A daemon
// without a cursor subscribes at the live tip, so the first commit must
// happen before any kill.
func (h *Harness) First(ctx context.Context) error {
	p, err := h.firstCommit(ctx)
	if err != nil {
		return err
	}
	return h.stop(ctx, p, StopKill, nil)
}

// firstCommit starts the daemon on an empty database, streams the seed
// graph and waits until all of it is committed. On an error the daemon
// is killed.
func (h *Harness) firstCommit(ctx context.Context) (*Process, error) {
	conns := len(h.Server.Queries())
	p, err := h.start()
	if err != nil {
		return nil, err
	}
	if !h.Server.WaitConnections(conns+1, 30*time.Second) {
		p.Signal(syscall.SIGKILL)
		return nil, fmt.Errorf("the daemon did not subscribe:\n%s", tail(p.Log()))
	}
	h.appendUpTo(h.Log.SeedFrames)
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := WaitCursor(wctx, h.DBPath, p, h.Log.Frames[h.Log.SeedFrames-1].TimeUS); err != nil {
		p.Signal(syscall.SIGKILL)
		return nil, fmt.Errorf("first commit: %w\n%s", err, tail(p.Log()))
	}
	return p, nil
}

// Run starts the daemon (with the failpoint armed, for a failpoint stop),
// appends frames up to index upTo over Pace, stops the daemon as stop
// says and checks the database.
func (h *Harness) Run(ctx context.Context, stop Stop, upTo int) error {
	var arm []string
	if _, ok := stop.failpoint(); ok {
		// The daemon kills itself the n-th time it passes there.
		arm = stop.Env(1 + h.rng.IntN(6))
	}
	p, err := h.start(arm...)
	if err != nil {
		return err
	}
	paced := make(chan struct{})
	go func() {
		defer close(paced)
		h.pace(upTo, h.Pace)
	}()
	return h.stop(ctx, p, stop, paced)
}

func (h *Harness) stop(ctx context.Context, p *Process, stop Stop, paced <-chan struct{}) error {
	landed, exit, err := EndRun(p, stop, time.Duration(h.rng.Int64N(int64(h.MaxStopAfter))), nil)
	if paced != nil {
		<-paced
	}
	if err != nil {
		return fmt.Errorf("%s: %w\n%s", stop, err, tail(p.Log()))
	}
	h.Landed[landed]++
	if err := h.Check(ctx); err != nil {
		return fmt.Errorf("after %s (run %d, %s): %w\n%s", stop, h.runs, exit, err, tail(p.Log()))
	}
	return nil
}

// Check compares the database with the model at the stored cursor: with
// the daemon stopped, exactly the frames up to the cursor must be applied,
// nothing more and nothing less, and the cursor must not have gone back.
func (h *Harness) Check(ctx context.Context) error {
	st, err := ReadState(ctx, h.DBPath, h.Model.accounts)
	if err != nil {
		return err
	}
	if n := len(h.Cursors); n > 0 && st.CursorUS < h.Cursors[n-1] {
		return fmt.Errorf("the stored cursor went back from %d to %d", h.Cursors[n-1], st.CursorUS)
	}
	h.Cursors = append(h.Cursors, st.CursorUS)
	if err := h.Model.AdvanceTo(st.CursorUS); err != nil {
		return err
	}
	if m := CompareState(h.Model, st); !m.Empty() {
		return fmt.Errorf("database at cursor %d differs from the log up to it:\n%s", st.CursorUS, m)
	}
	h.Logf("stop %d: cursor %d = %d of %d frames applied; %d follows, %d posts, %d feed rows equal to the model",
		len(h.Cursors), st.CursorUS, h.Model.next, len(h.Log.Frames), len(st.Follows), len(st.Posts), feedRows(st))
	return nil
}

// Finish streams the rest of the log into a clean run, waits until the
// sentinel is committed and a full sweep pass has started and ended after
// that, then checks the database and every viewer's getFeed against the
// whole log, and stops the daemon with SIGTERM.
func (h *Harness) Finish(ctx context.Context) error {
	p, err := h.start()
	if err != nil {
		return err
	}
	defer p.Signal(syscall.SIGKILL)
	h.appendUpTo(len(h.Log.Frames))
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := WaitCursor(wctx, h.DBPath, p, h.Log.EndUS); err != nil {
		return fmt.Errorf("%w\n%s", err, tail(p.Log()))
	}
	doneUS := time.Now().UnixMicro()
	if err := waitSweepPass(wctx, h.DBPath, doneUS); err != nil {
		return fmt.Errorf("%w\n%s", err, tail(p.Log()))
	}
	st, err := ReadState(ctx, h.DBPath, h.Model.accounts)
	if err != nil {
		return err
	}
	if err := h.Model.AdvanceTo(st.CursorUS); err != nil {
		return err
	}
	if h.Model.next != len(h.Log.Frames) {
		return fmt.Errorf("cursor %d covers %d of %d frames", st.CursorUS, h.Model.next, len(h.Log.Frames))
	}
	if m := CompareState(h.Model, st); !m.Empty() {
		return fmt.Errorf("final database differs from the log:\n%s", m)
	}
	cfg := h.Log.Workload.Config()
	viewers := make([]int32, 0, cfg.Viewers+20)
	for v := range cfg.Viewers {
		viewers = append(viewers, int32(v))
	}
	for i := range 20 { // accounts that follow nobody: empty feeds
		viewers = append(viewers, int32(cfg.Viewers+i*(cfg.Accounts-cfg.Viewers)/20))
	}
	m, pages, err := CompareGetFeed(ctx, p.Base, h.Model, viewers)
	if err != nil {
		return err
	}
	if !m.Empty() {
		return fmt.Errorf("getFeed differs from the log:\n%s", m)
	}
	h.Logf("getFeed: %d viewers, %d pages, %d feed rows, all equal to the model", len(viewers), pages, feedRows(st))
	if err := stopCleanly(p); err != nil {
		return err
	}
	return h.Check(ctx)
}

// stopCleanly stops the daemon with SIGTERM, which must end it with exit
// 0 within 30 s.
func stopCleanly(p *Process) error {
	p.Signal(syscall.SIGTERM)
	exit, err := p.Wait(30 * time.Second)
	if err != nil || exit.Code != 0 {
		return fmt.Errorf("final SIGTERM: %s %v\n%s", exit, err, tail(p.Log()))
	}
	return nil
}

func feedRows(st *DBState) int {
	n := 0
	for _, rows := range st.Feeds {
		n += len(rows)
	}
	return n
}

// waitSweepPass waits for a full sweep pass that started at or after
// afterUS (wall clock, as the sweep records it).
func waitSweepPass(ctx context.Context, dbPath string, afterUS int64) error {
	db, err := OpenReadOnly(dbPath)
	if err != nil {
		return err
	}
	defer db.Close()
	var end, lap int64
	for {
		err := db.QueryRowContext(ctx, `SELECT last_pass_end_us, last_pass_lap_us FROM sweep_state WHERE id = 1`).Scan(&end, &lap)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("read sweep state: %w", err)
		}
		if end > 0 && end-lap >= afterUS {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no full sweep pass after the stream ended (last ended %d, lap %d µs): %w", end, lap, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// tail is the end of a daemon log, for failure messages.
func tail(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return "    " + strings.Join(lines, "\n    ")
}
