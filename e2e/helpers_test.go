//go:build e2e

package e2e

import (
	"bufio"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"github.com/atfeeds/appview/internal/syncbuf"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/atfeeds/appview/jetstream/jetstreamtest"
)

// repoRoot is the module root, where the Dockerfile and README live.
const repoRoot = ".."

// Values the tests substitute for the Dockerfile's build args.
const (
	testVersion = "v0.0.0-e2e"
	testCommit  = "e2e0123456789"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary builds cmd/appview once per test run, with the environment and
// flags of the Dockerfile's `go build` instruction.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "appview-e2e-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "appview")
		b, err := dockerfileBuild(filepath.Join(repoRoot, "Dockerfile"), map[string]string{"VERSION": testVersion, "COMMIT": testCommit})
		if err != nil {
			buildErr = err
			return
		}
		buildErr = b.run(binPath)
	})
	if buildErr != nil {
		t.Fatalf("build appview as the Dockerfile does: %v", buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// goBuild is the Dockerfile's build command, parsed.
type goBuild struct {
	env  []string // NAME=value assignments before `go`
	args []string // after `go build`, with -o and its value removed
	pkg  string
}

func (b goBuild) run(out string) error {
	args := append([]string{"build"}, b.args...)
	args = append(args, "-o", out, b.pkg)
	cmd := exec.Command("go", args...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), b.env...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	return nil
}

// dockerfileBuild finds the RUN instruction that runs `go build`, joins
// its continuation lines, substitutes the build args and splits it as
// the shell would (double and single quotes, no other expansions).
func dockerfileBuild(path string, buildArgs map[string]string) (goBuild, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return goBuild{}, err
	}
	var run string
	for _, instr := range dockerInstructions(string(data)) {
		if rest, ok := strings.CutPrefix(instr, "RUN "); ok && strings.Contains(rest, "go build") {
			if run != "" {
				return goBuild{}, fmt.Errorf("more than one RUN with go build")
			}
			run = rest
		}
	}
	if run == "" {
		return goBuild{}, fmt.Errorf("no RUN instruction with go build")
	}
	var missing []string
	run = regexp.MustCompile(`\$\{(\w+)\}|\$(\w+)`).ReplaceAllStringFunc(run, func(m string) string {
		name := strings.Trim(m, "${}")
		v, ok := buildArgs[name]
		if !ok {
			missing = append(missing, name)
		}
		return v
	})
	if len(missing) > 0 {
		return goBuild{}, fmt.Errorf("go build uses build args %v the test does not set", missing)
	}
	words, err := shellWords(run)
	if err != nil {
		return goBuild{}, err
	}
	var b goBuild
	i := 0
	for ; i < len(words) && regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`).MatchString(words[i]); i++ {
		b.env = append(b.env, words[i])
	}
	if i+1 >= len(words) || words[i] != "go" || words[i+1] != "build" {
		return goBuild{}, fmt.Errorf("RUN %s: want [VAR=value…] go build …", run)
	}
	rest := words[i+2:]
	if len(rest) == 0 {
		return goBuild{}, fmt.Errorf("go build without a package")
	}
	b.pkg = rest[len(rest)-1]
	for j := 0; j < len(rest)-1; j++ {
		if rest[j] == "-o" {
			j++ // the image's output path
			continue
		}
		b.args = append(b.args, rest[j])
	}
	return b, nil
}

// dockerInstructions returns the Dockerfile's instructions with comments
// dropped and backslash continuations joined.
func dockerInstructions(src string) []string {
	var out []string
	var cur strings.Builder
	sc := bufio.NewScanner(strings.NewReader(src))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if body, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(line)
		out = append(out, strings.Join(strings.Fields(cur.String()), " "))
		cur.Reset()
	}
	return out
}

func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '"' || c == '\'':
			end := strings.IndexByte(s[i+1:], c)
			if end < 0 {
				return nil, fmt.Errorf("unterminated quote in %q", s)
			}
			cur.WriteString(s[i+1 : i+1+end])
			i += end + 1
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// need returns the path of a tool, skipping the test when it is missing
// on a developer's machine and failing it under CI, which installs it.
func need(t *testing.T, tool string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not installed (.ci/run installs it)", tool)
		}
		t.Skipf("%s is not installed", tool)
	}
	return p
}

// cleanEnv is the test process's environment without APPVIEW_ variables,
// which the daemon would read: each test sets its own.
func cleanEnv(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "APPVIEW_") {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}

// offlineSettings keep a daemon from reaching past the machine, for the
// keys this build has: identity lookups go to a closed loopback port, and
// private addresses stay refused, so they fail at once.
var offlineSettings = map[string]string{
	"APPVIEW_IDENTITY_PLC_URL":                "http://127.0.0.1:9",
	"APPVIEW_IDENTITY_ALLOW_PRIVATE_NETWORKS": "false",
}

// offlineEnv returns the offlineSettings that bin understands, as listed
// by `appview config --env`.
func offlineEnv(t *testing.T, bin string) []string {
	t.Helper()
	out, err := exec.Command(bin, "config", "--env").Output()
	if err != nil {
		t.Fatalf("%s config --env: %v", bin, err)
	}
	var env []string
	for _, name := range strings.Fields(string(out)) {
		if v, ok := offlineSettings[name]; ok {
			env = append(env, name+"="+v)
		}
	}
	return env
}

// freeAddr returns a loopback address nothing listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// process is a command running in its own process group, its output kept
// for failure messages.
type process struct {
	cmd    *exec.Cmd
	output *syncbuf.Buffer
	done   chan struct{}
	err    error
}

// start runs cmd in its own process group; the cleanup kills the group
// if the test has not stopped it.
func start(t *testing.T, cmd *exec.Cmd) *process {
	t.Helper()
	p := &process{cmd: cmd, output: new(syncbuf.Buffer), done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.output, p.output
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
		if t.Failed() {
			t.Logf("output of %s:\n%s", strings.Join(cmd.Args, " "), p.output.String())
		}
	})
	return p
}

// stop sends sig to the process group and waits for the exit.
func (p *process) stop(t *testing.T, sig syscall.Signal, timeout time.Duration) error {
	t.Helper()
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
		t.Fatalf("signal: %v", err)
	}
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %v of %v", p.cmd.Args[0], timeout, sig)
		return nil
	}
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitStatus polls url until it answers want, failing after timeout or as
// soon as the process dies.
func waitStatus(t *testing.T, p *process, url string, want int, timeout time.Duration) []byte {
	t.Helper()
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: 2 * time.Second}
	var last string
	for {
		if p != nil && p.exited() {
			t.Fatalf("process exited (%v) while waiting for %s", p.err, url)
		}
		resp, err := client.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == want {
				return body
			}
			last = fmt.Sprintf("status %d: %s", resp.StatusCode, body)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: no %d within %v (last: %s)", url, want, timeout, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// get fetches url and returns its body, failing unless the status is 200.
func get(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	return body
}

// buildSettings reads the build settings go stamped into a binary.
func buildSettings(t *testing.T, bin string) map[string]string {
	t.Helper()
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range info.Settings {
		out[s.Key] = s.Value
	}
	return out
}

// appviewProc is the built binary serving against a fake Jetstream.
type appviewProc struct {
	*process
	base string // http://127.0.0.1:port
	dir  string // working directory, where ./appview.db lands by default
	env  []string
}

// startAppview runs `appview serve` in a fresh directory, configured only
// through the environment, and waits until it is live and subscribed.
func startAppview(t *testing.T, js *jetstreamtest.Server, extraEnv ...string) *appviewProc {
	t.Helper()
	bin := binary(t)
	addr := freeAddr(t)
	env := cleanEnv(append(append([]string{
		"APPVIEW_JETSTREAM_URLS=" + js.URL(),
		"APPVIEW_HTTP_LISTEN=" + addr,
		"APPVIEW_INGEST_BATCH_INTERVAL=10ms",
		// Every account with stored follows is a viewer, so the scripted
		// follow makes alice's feed without a first read from her PDS.
		"APPVIEW_INGEST_INDEX_ALL=true",
	}, offlineEnv(t, bin)...), extraEnv...)...)
	subscribed := len(js.Queries())
	cmd := exec.Command(bin, "serve")
	cmd.Dir = t.TempDir()
	cmd.Env = env
	p := &appviewProc{process: start(t, cmd), base: "http://" + addr, dir: cmd.Dir, env: env}
	waitStatus(t, p.process, p.base+"/xrpc/_health", http.StatusOK, 30*time.Second)
	if !js.WaitConnections(subscribed+1, 30*time.Second) {
		t.Fatal("appview did not subscribe to the fake jetstream")
	}
	return p
}

// Accounts of the scripted timeline: alice follows bob, bob posts.
const (
	alice = "did:plc:alice000000000000000000a"
	bob   = "did:plc:bob00000000000000000000b"
)

// appendTimeline scripts a follow and n posts, returning the last time_us.
func appendTimeline(js *jetstreamtest.Server, n int) int64 {
	t0 := time.Now().UnixMicro()
	js.Append(jetstreamtest.Follow("app.bsky.graph.follow", alice, "3laaaaaaaaaa2", bob, t0))
	last := t0
	for i := range n {
		last = t0 + int64(i+1)*1000
		js.Append(jetstreamtest.Post(bob, fmt.Sprintf("3lbbbbbbbb%03d", i), last, fmt.Sprintf("post %d", i)))
	}
	return last
}

// feedPage is a getFeed response, decoded.
type feedPage struct {
	Records []struct {
		URI  string `json:"uri"`
		RKey string `json:"rkey"`
	} `json:"records"`
	Cursor string `json:"cursor"`
}

// feedURL is the getFeed request of actor's "following" feed.
func feedURL(base, namespace, actor string, limit int, cursor string) string {
	q := url.Values{"feed": {"following"}, "actor": {actor}, "limit": {strconv.Itoa(limit)}}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	return base + "/xrpc/" + namespace + ".getFeed?" + q.Encode()
}

// waitFeed polls actor's feed until it holds n records.
func waitFeed(t *testing.T, base, actor string, n int) {
	t.Helper()
	waitFeedNS(t, base, "com.example.appview", actor, n)
}

func waitFeedNS(t *testing.T, base, namespace, actor string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var page feedPage
		if err := json.Unmarshal(get(t, feedURL(base, namespace, actor, 100, "")), &page); err != nil {
			t.Fatal(err)
		}
		if len(page.Records) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("feed of %s has %d records after 30s, want %d", actor, len(page.Records), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
