package workload

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"math"
	"testing"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/jetstream"
)

// smallConfig is a workload small enough for -race: 5k accounts, 500
// viewers following 40 on average.
func smallConfig() Config {
	cfg := DefaultConfig()
	cfg.Accounts, cfg.Viewers, cfg.Follows = 5000, 500, 40
	return cfg
}

func mustNew(tb testing.TB, cfg Config) *Workload {
	tb.Helper()
	w, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return w
}

// digest hashes the graph and the first n stream frames, kinds and times
// included.
func digest(w *Workload, n int) [32]byte {
	h := sha256.New()
	g := w.Graph()
	for f, ok := g.Next(); ok; f, ok = g.Next() {
		h.Write(f.Data)
	}
	s := w.Stream()
	for range n {
		f := s.Next()
		h.Write([]byte{byte(f.Kind)})
		h.Write([]byte{byte(f.TimeUS), byte(f.TimeUS >> 8)})
		h.Write(f.Data)
	}
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

func TestDeterministic(t *testing.T) {
	cfg := smallConfig()
	a := digest(mustNew(t, cfg), 20_000)
	b := digest(mustNew(t, cfg), 20_000)
	if a != b {
		t.Fatal("the same config gave different frames")
	}
	cfg.Seed++
	if c := digest(mustNew(t, cfg), 20_000); c == a {
		t.Fatal("a different seed gave the same frames")
	}
}

func TestMixProportions(t *testing.T) {
	w := mustNew(t, smallConfig())
	s := w.Stream()
	const n = 100_000
	for range n {
		s.Next()
	}
	m := w.Config().Mix
	fresh := (1 - m.Duplicate - m.Malformed) / (m.PostCreate + m.PostUpdate + m.PostDelete + m.FollowCreate + m.FollowDelete)
	want := map[Kind]float64{
		KindPostCreate:   m.PostCreate * fresh,
		KindPostUpdate:   m.PostUpdate * fresh,
		KindPostDelete:   m.PostDelete * fresh,
		KindFollowCreate: m.FollowCreate * fresh,
		KindFollowDelete: m.FollowDelete * fresh,
		KindDuplicate:    m.Duplicate,
		KindMalformed:    m.Malformed,
	}
	counts := s.Counts()
	if counts[KindFollowSeed] != 0 {
		t.Errorf("the main stream holds %d seed follows", counts[KindFollowSeed])
	}
	for k, p := range want {
		// Five standard deviations of a binomial count, plus a little for
		// the fallbacks at the start of the stream.
		tol := 5*math.Sqrt(n*p*(1-p)) + 20
		if got := float64(counts[k]); math.Abs(got-n*p) > tol {
			t.Errorf("%s: %d frames, want %.0f ± %.0f", k, counts[k], n*p, tol)
		}
	}
	if s.Count() != n {
		t.Errorf("Count() = %d, want %d", s.Count(), n)
	}
}

// TestFramesDecode runs the graph and the stream through the daemon's
// decoder: every frame but the malformed ones decodes, as the commit its
// kind says, with the generator's time_us; every malformed one is dropped.
// It also replays the records: every update and delete names a record that
// exists, and every create one that does not.
func TestFramesDecode(t *testing.T) {
	cfg := smallConfig()
	cfg.Viewers, cfg.Follows = 200, 20 // a smaller graph: decoding is slow under -race
	w := mustNew(t, cfg)
	dec := jetstream.NewDecoder(jetstream.DecoderConfig{FollowCollections: []syntax.NSID{FollowCollection}})
	type key struct {
		did  syntax.DID
		coll syntax.NSID
		rkey syntax.RecordKey
	}
	live := map[key]bool{}
	check := func(f Frame) {
		t.Helper()
		ev, err := dec.Decode(f.Data)
		if f.Kind == KindMalformed {
			var drop *jetstream.DropError
			if !errors.As(err, &drop) {
				t.Fatalf("malformed frame decoded (err %v): %q", err, f.Data)
			}
			return
		}
		if err != nil {
			t.Fatalf("%s frame: %v: %s", f.Kind, err, f.Data)
		}
		if ev.Kind != jetstream.KindCommit || ev.TimeUS != f.TimeUS {
			t.Fatalf("%s frame decoded as %s at %d, want a commit at %d", f.Kind, ev.Kind, ev.TimeUS, f.TimeUS)
		}
		c := ev.Commit
		k := key{ev.DID, c.Collection, c.RKey}
		wantColl, wantOp := syntax.NSID(PostCollection), jetstream.OpCreate
		switch f.Kind {
		case KindFollowSeed, KindFollowCreate:
			wantColl = FollowCollection
			if c.Subject == "" || c.Subject == ev.DID {
				t.Fatalf("follow subject %q of %s", c.Subject, ev.DID)
			}
		case KindFollowDelete:
			wantColl, wantOp = FollowCollection, jetstream.OpDelete
		case KindPostUpdate:
			wantOp = jetstream.OpUpdate
		case KindPostDelete:
			wantOp = jetstream.OpDelete
		case KindDuplicate:
			return // a repeat of a frame already checked
		}
		if c.Collection != wantColl || c.Operation != wantOp {
			t.Fatalf("%s frame is a %s in %s", f.Kind, c.Operation, c.Collection)
		}
		switch c.Operation {
		case jetstream.OpCreate:
			if live[k] {
				t.Fatalf("%s creates %v twice", f.Kind, k)
			}
			live[k] = true
		case jetstream.OpUpdate:
			if !live[k] {
				t.Fatalf("update of %v, which does not exist", k)
			}
		case jetstream.OpDelete:
			if !live[k] {
				t.Fatalf("delete of %v, which does not exist", k)
			}
			delete(live, k)
		}
	}
	g := w.Graph()
	for f, ok := g.Next(); ok; f, ok = g.Next() {
		check(f)
	}
	s := w.Stream()
	for range 20_000 {
		check(s.Next())
	}
	if c := s.Counts(); c[KindMalformed] == 0 || c[KindDuplicate] == 0 || c[KindFollowDelete] == 0 || c[KindPostUpdate] == 0 {
		t.Fatalf("20k frames lack a kind: %v", c)
	}
}

func TestTimesIncrease(t *testing.T) {
	w := mustNew(t, smallConfig())
	g := w.Graph()
	var last int64
	for f, ok := g.Next(); ok; f, ok = g.Next() {
		if f.TimeUS <= last {
			t.Fatalf("seed follow %d at %d after %d", g.Count(), f.TimeUS, last)
		}
		last = f.TimeUS
	}
	if last > w.SeedEndUS() || w.SeedEndUS() >= w.Config().StartUS {
		t.Fatalf("seed ends at %d, SeedEndUS %d, stream starts at %d", last, w.SeedEndUS(), w.Config().StartUS)
	}
	s := w.Stream()
	for i := range 20_000 {
		f := s.Next()
		if f.Kind == KindDuplicate {
			if f.TimeUS > last {
				t.Fatalf("duplicate %d is newer (%d) than the stream (%d)", i, f.TimeUS, last)
			}
			continue
		}
		if f.TimeUS <= last {
			t.Fatalf("frame %d (%s) at %d after %d", i, f.Kind, f.TimeUS, last)
		}
		last = f.TimeUS
	}
}

func TestFollowees(t *testing.T) {
	w := mustNew(t, smallConfig())
	cfg := w.Config()
	var total int
	followedTop := 0
	top := w.byPopularity[0]
	for v := range cfg.Viewers {
		list := w.Followees(v, nil)
		again := w.Followees(v, make([]int32, 3))
		if !slicesEqual(list, again) {
			t.Fatalf("viewer %d: followees differ between calls", v)
		}
		if len(list) < cfg.Follows/2 || len(list) > cfg.maxDegree() {
			t.Fatalf("viewer %d follows %d accounts, want %d…%d", v, len(list), cfg.Follows/2, cfg.maxDegree())
		}
		seen := map[int32]bool{}
		for _, a := range list {
			if int(a) == v || seen[a] || a < 0 || int(a) >= cfg.Accounts {
				t.Fatalf("viewer %d: bad followee %d in %v", v, a, list)
			}
			seen[a] = true
		}
		if seen[top] {
			followedTop++
		}
		total += len(list)
	}
	if mean := float64(total) / float64(cfg.Viewers); math.Abs(mean-float64(cfg.Follows)) > 0.1*float64(cfg.Follows) {
		t.Errorf("mean follows %.1f, want about %d", mean, cfg.Follows)
	}
	// Zipf-like: the most popular account is followed by most viewers,
	// while the mean account is followed by Viewers*Follows/Accounts.
	if followedTop < cfg.Viewers/2 {
		t.Errorf("the most popular account has %d of %d viewers as followers", followedTop, cfg.Viewers)
	}
}

func slicesEqual(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestIdentifiers(t *testing.T) {
	seen := map[string]bool{}
	for _, i := range []int{0, 1, 2, 31, 32, 99_999, 1 << 30} {
		d := AccountDID(i)
		if _, err := syntax.ParseDID(d); err != nil || len(d) != len("did:plc:")+24 {
			t.Errorf("AccountDID(%d) = %q: %v", i, d, err)
		}
		if seen[d] {
			t.Errorf("AccountDID(%d) = %q repeats", i, d)
		}
		seen[d] = true
	}
	for _, us := range []int64{0, 1, 1_767_225_600_000_000, 1<<53 - 1} {
		for _, clock := range []uint16{0, 7, 1023} {
			got := string(appendTID(nil, us, clock))
			if want := string(syntax.NewTID(us, uint(clock))); got != want {
				t.Errorf("appendTID(%d, %d) = %s, want %s", us, clock, got, want)
			}
		}
	}
	if _, err := syntax.ParseCID(string(appendCID(nil, 42))); err != nil {
		t.Errorf("appendCID: %v", err)
	}
}

// TestStreamAllocations checks that the generator holds nothing per frame:
// after warming up, a frame costs well under one allocation on average.
func TestStreamAllocations(t *testing.T) {
	s := mustNew(t, smallConfig()).Stream()
	for range 5_000 {
		s.Next()
	}
	if a := testing.AllocsPerRun(20_000, func() { s.Next() }); a > 0.5 {
		t.Errorf("%.2f allocations per frame", a)
	}
}

func TestLogRoundTrip(t *testing.T) {
	w := mustNew(t, smallConfig())
	var buf bytes.Buffer
	lw := NewLogWriter(&buf)
	s := w.Stream()
	var want []Frame
	for range 1000 {
		f := s.Next()
		f.Data = bytes.Clone(f.Data)
		want = append(want, f)
		if err := lw.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := lw.Flush(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	lr := NewLogReader(bytes.NewReader(data))
	for i, wf := range want {
		f, err := lr.Next()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if f.Kind != wf.Kind || f.TimeUS != wf.TimeUS || !bytes.Equal(f.Data, wf.Data) {
			t.Fatalf("frame %d: got %v %d %q, want %v %d %q", i, f.Kind, f.TimeUS, f.Data, wf.Kind, wf.TimeUS, wf.Data)
		}
	}
	if _, err := lr.Next(); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
	lr = NewLogReader(bytes.NewReader(data[:len(data)-3]))
	var err error
	for err == nil {
		_, err = lr.Next()
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated log: %v, want io.ErrUnexpectedEOF", err)
	}
}

func TestValidate(t *testing.T) {
	for name, mutate := range map[string]func(*Config){
		"accounts":     func(c *Config) { c.Accounts = 1 },
		"viewers":      func(c *Config) { c.Viewers = c.Accounts + 1 },
		"follows":      func(c *Config) { c.Follows = c.Accounts },
		"follow_skew":  func(c *Config) { c.FollowSkew = 0 },
		"start_us":     func(c *Config) { c.StartUS = 5 },
		"mix.dup":      func(c *Config) { c.Mix.Duplicate = -1 },
		"mix.post":     func(c *Config) { c.Mix.PostCreate = 0 },
		"mix.too_much": func(c *Config) { c.Mix.Duplicate, c.Mix.Malformed = 0.5, 0.5 },
	} {
		cfg := DefaultConfig()
		mutate(&cfg)
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
}

// TestStreamFollowsAreMostlyNewFollowees: a follow create of an account
// the viewer already follows adds no followee; a third of them did, so the
// mix's follow creates exercised the new-followee path much less than
// their share says (a review).
func TestStreamFollowsAreMostlyNewFollowees(t *testing.T) {
	w := mustNew(t, smallConfig())
	byDID := map[string]int32{}
	for i := range w.Config().Accounts {
		byDID[AccountDID(i)] = int32(i)
	}
	st := w.Stream()
	var creates, repeats int
	var followees []int32
	for range 200_000 {
		f := st.Next()
		if f.Kind != KindFollowCreate {
			continue
		}
		var ev struct {
			DID    string `json:"did"`
			Commit struct {
				Record struct {
					Subject string `json:"subject"`
				} `json:"record"`
			} `json:"commit"`
		}
		if err := json.Unmarshal(f.Data, &ev); err != nil {
			t.Fatal(err)
		}
		followees = w.Followees(int(byDID[ev.DID]), followees)
		creates++
		if containsInt32(followees, byDID[ev.Commit.Record.Subject]) {
			repeats++
		}
	}
	if creates < 1000 {
		t.Fatalf("only %d follow creates in the stream", creates)
	}
	if share := float64(repeats) / float64(creates); share > 0.02 {
		t.Errorf("%d of %d follow creates (%.1f%%) follow an account the seed graph already has", repeats, creates, 100*share)
	}
}
