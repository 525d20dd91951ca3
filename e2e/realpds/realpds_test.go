//go:build realpds

package realpds

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/atfeeds/appview/appview"
	"github.com/atfeeds/appview/jetstream/jetstreamtest"
)

const (
	postNSID   = "app.bsky.feed.post"
	followNSID = "app.bsky.graph.follow"
	getFeed    = "/xrpc/com.example.appview.getFeed"

	// The PLC and PDS are healthy about 3 s after start; allow for a slow,
	// busy CI machine.
	serversStartTimeout = 90 * time.Second
	// The first read resolves a handle, a DID document, lists follows and
	// the followees' posts: milliseconds here, but never flaky.
	firstReadWait = 30 * time.Second
)

// TestFirstReadAgainstReferencePDS runs the reference PLC and PDS from npm,
// writes accounts, follows and posts to the PDS over XRPC, then starts the
// daemon (with the fake Jetstream, which has seen none of it) and reads the
// viewer's feed: the first read backfills it from the PDS.
func TestFirstReadAgainstReferencePDS(t *testing.T) {
	srv := startServers(t)

	alice := srv.createAccount(t, "alice.test")
	bob := srv.createAccount(t, "bob.test")
	carol := srv.createAccount(t, "carol.test")
	dave := srv.createAccount(t, "dave.test") // alice does not follow dave

	now := time.Now().UTC()
	srv.createRecord(t, alice, followNSID, followRecord(bob.DID, now))
	srv.createRecord(t, alice, followNSID, followRecord(carol.DID, now))
	// Oldest first, alternating authors, so newest-first order interleaves
	// them; the PDS mints increasing TID record keys in the same order.
	var posts []created
	for i, a := range []account{bob, carol, bob, carol} {
		text := fmt.Sprintf("post %d by %s, only on the PDS", i+1, a.Handle)
		posts = append(posts, srv.createRecord(t, a, postNSID, postRecord(text, now.Add(time.Duration(i-10)*time.Minute))))
	}
	srv.createRecord(t, dave, postNSID, postRecord("dave's post, not followed", now.Add(-time.Minute)))
	want := reversed(posts)

	js := jetstreamtest.NewServer()
	t.Cleanup(js.Close)
	d := startDaemon(t, srv, js)

	// The first read, by handle: .test handles resolve through the PDS.
	start := time.Now()
	got := d.feed(t, "alice.test")
	t.Logf("first read of alice.test took %v", time.Since(start).Round(time.Millisecond))
	if !sameItems(got, want) {
		t.Errorf("first read of alice.test:\n%s\nwant:\n%s", describe(got), describe(want))
		d.reportEventually(t, "alice.test", want)
	}
	// The same feed by DID.
	if got := d.feed(t, alice.DID); !sameItems(got, want) {
		t.Errorf("feed of %s (alice's DID):\n%s\nwant:\n%s", alice.DID, describe(got), describe(want))
	}
	// A handle the PDS does not know is not an actor.
	if status, body := d.get(t, getFeed+"?"+url.Values{"feed": {"following"}, "actor": {"nobody.test"}}.Encode()); status != http.StatusBadRequest || !strings.Contains(body, `"error":"ActorNotFound"`) {
		t.Errorf("actor=nobody.test: %d %s, want 400 ActorNotFound", status, body)
	}
	if t.Failed() {
		return
	}

	// Live: bob posts again on the PDS and Jetstream delivers the commit,
	// as the real Jetstream would, with the PDS's own cid and rev.
	rec := postRecord("bob's live post", time.Now().UTC())
	live := srv.createRecord(t, bob, postNSID, rec)
	js.Append(jetstreamCreate(t, bob.DID, live, rec))
	d.waitFeed(t, "alice.test", append([]created{live}, want...))
}

// --- the reference PLC and PDS ---------------------------------------------

type servers struct {
	plcURL, pdsURL string // http://127.0.0.1:PORT
	client         *http.Client
}

// startServers runs servers.js on free loopback ports and waits until both
// servers answer their health checks. A port taken between choosing it and
// listening on it is retried with new ports.
func startServers(t *testing.T) *servers {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not on PATH; e2e/realpds/run.sh installs what this test needs")
	}
	if _, err := os.Stat(filepath.Join("node_modules", "@atproto", "pds", "package.json")); err != nil {
		t.Fatalf("e2e/realpds/node_modules has no @atproto/pds (%v); run e2e/realpds/run.sh, or npm ci in e2e/realpds", err)
	}
	for attempt := 1; ; attempt++ {
		srv, log, err := tryStartServers(t, node)
		if err == nil {
			return srv
		}
		if attempt < 3 && strings.Contains(log.String(), "EADDRINUSE") {
			t.Logf("servers.js (attempt %d): %v; retrying on other ports", attempt, err)
			continue
		}
		t.Fatalf("reference PLC and PDS did not start: %v\n--- servers.js output (tail) ---\n%s", err, log.Tail(60))
	}
}

func tryStartServers(t *testing.T, node string) (*servers, *tailBuffer, error) {
	plcPort, pdsPort := freePort(t), freePort(t)
	for pdsPort == plcPort {
		pdsPort = freePort(t)
	}
	dataDir := t.TempDir() // removed after the process is stopped (cleanups run last-in first-out)
	log := &tailBuffer{max: 256 << 10}
	ready := make(chan string, 1)
	cmd := exec.Command(node, "servers.js")
	cmd.Env = append(os.Environ(),
		"REALPDS_PLC_PORT="+strconv.Itoa(plcPort),
		"REALPDS_PDS_PORT="+strconv.Itoa(pdsPort),
		"REALPDS_DATA_DIR="+dataDir,
		// If this test process dies without cleanups, the pipe closes and
		// the servers exit rather than linger.
		"REALPDS_EXIT_ON_STDIN_EOF=1",
	)
	if _, err := cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = &lineWriter{w: log, line: func(l string) {
		if strings.HasPrefix(l, "READY ") {
			select {
			case ready <- l:
			default:
			}
		}
	}}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		return nil, log, fmt.Errorf("start node servers.js: %w", err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		stopProcess(t, cmd, exited)
		if t.Failed() {
			t.Logf("--- servers.js output (tail) ---\n%s", log.Tail(60))
		}
	})

	srv := &servers{
		plcURL: fmt.Sprintf("http://127.0.0.1:%d", plcPort),
		pdsURL: fmt.Sprintf("http://127.0.0.1:%d", pdsPort),
		client: &http.Client{Timeout: 30 * time.Second},
	}
	started := time.Now()
	deadline := time.NewTimer(serversStartTimeout)
	defer deadline.Stop()
	select {
	case <-ready:
	case <-exited:
		return nil, log, fmt.Errorf("servers.js exited before it was ready: %v", waitErr)
	case <-deadline.C:
		return nil, log, fmt.Errorf("servers.js not ready within %v", serversStartTimeout)
	}
	for _, u := range []string{srv.plcURL + "/_health", srv.pdsURL + "/xrpc/_health"} {
		for {
			resp, err := srv.client.Get(u)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
			select {
			case <-exited:
				return nil, log, fmt.Errorf("servers.js exited during health checks: %v", waitErr)
			case <-deadline.C:
				return nil, log, fmt.Errorf("GET %s not healthy within %v: %v", u, serversStartTimeout, err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	t.Logf("reference PLC at %s and PDS at %s healthy after %v", srv.plcURL, srv.pdsURL, time.Since(started).Round(time.Millisecond))
	return srv, log, nil
}

// stopProcess ends the servers: SIGTERM, then SIGKILL if they linger.
func stopProcess(t *testing.T, cmd *exec.Cmd, exited <-chan struct{}) {
	select {
	case <-exited:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		return
	case <-time.After(10 * time.Second):
	}
	t.Logf("servers.js did not stop within 10s of SIGTERM; killing it")
	_ = cmd.Process.Kill()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Errorf("servers.js (pid %d) still running after SIGKILL", cmd.Process.Pid)
	}
}

// freePort is a TCP port free on loopback right now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type account struct {
	DID       string `json:"did"`
	Handle    string `json:"handle"`
	AccessJwt string `json:"accessJwt"`
}

// created is a record as the PDS reported creating it.
type created struct {
	URI  string
	CID  string
	Rev  string // the repo revision of the commit
	Text string // the post's text; empty for other records
}

func (s *servers) createAccount(t *testing.T, handle string) account {
	t.Helper()
	name := strings.TrimSuffix(handle, ".test")
	var a account
	s.xrpc(t, "com.atproto.server.createAccount", "", map[string]any{
		"handle": handle, "email": name + "@example.test", "password": "password-" + name,
	}, &a)
	if !strings.HasPrefix(a.DID, "did:plc:") || a.Handle != handle || a.AccessJwt == "" {
		t.Fatalf("createAccount %s: got did=%q handle=%q jwt=%t", handle, a.DID, a.Handle, a.AccessJwt != "")
	}
	return a
}

func (s *servers) createRecord(t *testing.T, a account, collection string, record map[string]any) created {
	t.Helper()
	var out struct {
		URI    string `json:"uri"`
		CID    string `json:"cid"`
		Commit struct {
			Rev string `json:"rev"`
		} `json:"commit"`
	}
	s.xrpc(t, "com.atproto.repo.createRecord", a.AccessJwt, map[string]any{
		"repo": a.DID, "collection": collection, "record": record,
	}, &out)
	prefix := "at://" + a.DID + "/" + collection + "/"
	if !strings.HasPrefix(out.URI, prefix) || out.CID == "" {
		t.Fatalf("createRecord %s in %s: uri=%q cid=%q", collection, a.Handle, out.URI, out.CID)
	}
	text, _ := record["text"].(string)
	return created{URI: out.URI, CID: out.CID, Rev: out.Commit.Rev, Text: text}
}

func (s *servers) xrpc(t *testing.T, method, jwt string, in, out any) {
	t.Helper()
	body, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, s.pdsURL+"/xrpc/"+method, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if jwt != "" {
		req.Header.Set("Authorization", "Bearer "+jwt)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", method, err)
	}
	defer resp.Body.Close()
	respBody, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d %s", method, resp.StatusCode, respBody)
	}
	if err := json.Unmarshal(respBody, out); err != nil {
		t.Fatalf("POST %s: %v in %s", method, err, respBody)
	}
}

func followRecord(subject string, at time.Time) map[string]any {
	return map[string]any{"$type": followNSID, "subject": subject, "createdAt": at.Format(time.RFC3339Nano)}
}

func postRecord(text string, at time.Time) map[string]any {
	return map[string]any{"$type": postNSID, "text": text, "createdAt": at.Format(time.RFC3339Nano), "langs": []string{"en"}}
}

// jetstreamCreate is the Jetstream frame for a record the PDS created.
func jetstreamCreate(t *testing.T, did string, c created, record map[string]any) []byte {
	t.Helper()
	frame, err := json.Marshal(map[string]any{
		"did": did, "time_us": time.Now().UnixMicro(), "kind": "commit",
		"commit": map[string]any{
			"rev": c.Rev, "operation": "create", "collection": postNSID,
			"rkey": c.URI[strings.LastIndex(c.URI, "/")+1:], "record": record, "cid": c.CID,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return frame
}

// --- the daemon ------------------------------------------------------------

type daemon struct {
	base   string
	client *http.Client
}

func startDaemon(t *testing.T, srv *servers, js *jetstreamtest.Server) *daemon {
	t.Helper()
	cfg := appview.DefaultConfig()
	cfg.Database.Path = filepath.Join(t.TempDir(), "appview.db")
	cfg.Jetstream.URLs = []string{js.URL()}
	cfg.Ingest.BatchInterval = 5 * time.Millisecond
	cfg.Ingest.IndexAll = false // serve viewers: the first read is what brings alice's follows in
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.Identity.PLCURL = srv.plcURL
	cfg.Identity.HandleResolverURL = srv.pdsURL
	// The DID documents name the PDS as http://localhost:PORT.
	cfg.Identity.AllowPrivateNetworks = true
	cfg.Backfill.FirstReadWait = firstReadWait

	logs := &tailBuffer{max: 256 << 10}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d, err := appview.Build(context.Background(), cfg, appview.Options{Listener: l, Logger: logger})
	if err != nil {
		l.Close()
		t.Fatalf("build daemon: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("daemon run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("daemon did not stop within 15s")
		}
		if err := d.Close(context.Background()); err != nil {
			t.Errorf("daemon close: %v", err)
		}
		if t.Failed() {
			t.Logf("--- daemon log (tail) ---\n%s", logs.Tail(80))
		}
	})
	if !js.WaitConnections(1, 15*time.Second) {
		t.Fatal("daemon did not subscribe to the fake Jetstream within 15s")
	}
	return &daemon{base: "http://" + l.Addr().String(), client: &http.Client{Timeout: firstReadWait + 30*time.Second}}
}

func (d *daemon) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := d.client.Get(d.base + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

type item struct {
	URI        string `json:"uri"`
	CID        string `json:"cid"`
	DID        string `json:"did"`
	Collection string `json:"collection"`
	RKey       string `json:"rkey"`
	Value      struct {
		Type string `json:"$type"`
		Text string `json:"text"`
	} `json:"value"`
}

// feed reads an actor's whole following feed, a few items a page, so that
// the page cursors are exercised too.
func (d *daemon) feed(t *testing.T, actor string) []item {
	t.Helper()
	var out []item
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatalf("feed of %s: more than 100 pages", actor)
		}
		q := url.Values{"feed": {"following"}, "actor": {actor}, "limit": {"3"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		path := getFeed + "?" + q.Encode()
		status, body := d.get(t, path)
		if status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, status, body)
		}
		var page struct {
			Records []item `json:"records"`
			Cursor  string `json:"cursor"`
		}
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			t.Fatalf("GET %s: %v in %s", path, err, body)
		}
		out = append(out, page.Records...)
		if page.Cursor == "" || len(page.Records) == 0 {
			return out
		}
		cursor = page.Cursor
	}
}

func (d *daemon) waitFeed(t *testing.T, actor string, want []created) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := d.feed(t, actor)
		if sameItems(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("feed of %s after 20s:\n%s\nwant:\n%s", actor, describe(got), describe(want))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// reportEventually, after a wrong first read, tells whether the backfill
// got there later (too slow) or never (wrong).
func (d *daemon) reportEventually(t *testing.T, actor string, want []created) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if sameItems(d.feed(t, actor), want) {
			t.Logf("the feed of %s was right %v after the first read: the backfill is slower than first_read_wait", actor, firstReadWait)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the feed of %s was still wrong 20s after the first read", actor)
}

func sameItems(got []item, want []created) bool {
	if len(got) != len(want) {
		return false
	}
	for i, g := range got {
		w := want[i]
		if g.URI != w.URI || g.CID != w.CID || g.Value.Text != w.Text || g.Value.Type != postNSID ||
			g.Collection != postNSID || !strings.HasPrefix(w.URI, "at://"+g.DID+"/") {
			return false
		}
	}
	return true
}

func describe[T item | created](xs []T) string {
	if len(xs) == 0 {
		return "  (empty)"
	}
	var b strings.Builder
	for i, x := range xs {
		switch x := any(x).(type) {
		case item:
			fmt.Fprintf(&b, "  %d. %s cid=%s did=%s collection=%s text=%q\n", i+1, x.URI, x.CID, x.DID, x.Collection, x.Value.Text)
		case created:
			fmt.Fprintf(&b, "  %d. %s cid=%s text=%q\n", i+1, x.URI, x.CID, x.Text)
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

func reversed[T any](xs []T) []T {
	out := make([]T, len(xs))
	for i, x := range xs {
		out[len(xs)-1-i] = x
	}
	return out
}

// --- output plumbing -------------------------------------------------------

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// Tail is the last n lines.
func (b *tailBuffer) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("(%d earlier lines left out)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// lineWriter copies to w and calls line for every complete line.
type lineWriter struct {
	w       io.Writer
	line    func(string)
	partial []byte
}

func (lw *lineWriter) Write(p []byte) (int, error) {
	lw.partial = append(lw.partial, p...)
	for {
		i := bytes.IndexByte(lw.partial, '\n')
		if i < 0 {
			break
		}
		lw.line(string(lw.partial[:i]))
		lw.partial = lw.partial[i+1:]
	}
	return lw.w.Write(p)
}
