//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/atfeeds/appview/jetstream/jetstreamtest"
)

// A newcomer's path: the README's run command, exactly as written, from
// the repository root with no config file. Only the environment differs
// (the fake Jetstream instead of the public one, a free port, a temporary
// database), so nothing leaves the machine. The daemon answers liveness,
// readiness and metrics, then stops with exit code 0 on SIGTERM.
func TestReadmeRunCommand(t *testing.T) {
	need(t, "go")
	args := readmeRunCommand(t)

	js := jetstreamtest.NewServer()
	defer js.Close()
	addr := freeAddr(t)
	base := "http://" + addr
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = repoRoot
	// The binary built from the same tree knows the same variables.
	cmd.Env = cleanEnv(append(offlineEnv(t, binary(t)),
		"APPVIEW_JETSTREAM_URLS="+js.URL(),
		"APPVIEW_HTTP_LISTEN="+addr,
		"APPVIEW_DATABASE_PATH="+filepath.Join(t.TempDir(), "appview.db"),
	)...)
	p := start(t, cmd)

	// go run compiles first: allow for a cold build cache.
	waitStatus(t, p, base+"/xrpc/_health", http.StatusOK, 5*time.Minute)
	if !js.WaitConnections(1, 30*time.Second) {
		t.Fatal("daemon did not subscribe to the fake jetstream")
	}
	waitStatus(t, p, base+"/readyz", http.StatusOK, 30*time.Second)
	metrics := string(get(t, base+"/metrics"))
	for _, want := range []string{"appview_build_info{", "appview_jetstream_connected 1", "go_goroutines "} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// go run waits for the program and exits with its status; SIGTERM
	// goes to the program itself, as a service manager would send it.
	daemon := childOf(t, cmd.Process.Pid)
	if err := syscall.Kill(daemon, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
		if p.err != nil {
			t.Fatalf("%s exited with %v after SIGTERM, want 0", strings.Join(args, " "), p.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit within 30s of SIGTERM")
	}
	if out := p.output.String(); !strings.Contains(out, "appview stopped cleanly") {
		t.Errorf("no clean-stop line in the log:\n%s", out)
	}
}

// readmeRunCommand is the first `go run` line of the README.
func readmeRunCommand(t *testing.T) []string {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(readFile(t, filepath.Join(repoRoot, "README.md"))))
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "go run ") {
			return strings.Fields(line)
		}
	}
	t.Fatal("README has no `go run` line")
	return nil
}

// childOf waits for the one child process of pid (the program go run
// started) and returns its pid.
func childOf(t *testing.T, pid int) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		entries, err := os.ReadDir("/proc")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			child, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
			if err != nil {
				continue
			}
			// pid (comm) state ppid …; comm may hold spaces, so split
			// after its closing parenthesis.
			fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
			if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
				return child
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d has no child", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
