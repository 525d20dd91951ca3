package crashtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/atfeeds/appview/failpoint"
)

// BuildBinary builds cmd/appview into dir and returns its path. The module
// root is found with go env GOMOD, so it works from any directory inside
// the module.
func BuildBinary(dir string) (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	bin := filepath.Join(dir, "appview")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/appview")
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/appview: %v\n%s", err, msg)
	}
	return bin, nil
}

// FreeAddr returns a loopback address with a port nothing listens on.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// StartServe runs "bin serve --config cfgPath" with env on top of this
// process's environment (see Start), listening on a free loopback port
// whose base URL it sets in Base.
func StartServe(bin, cfgPath, logPath string, env []string) (*Process, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	env = append(append([]string(nil), env...), "APPVIEW_HTTP_LISTEN="+addr)
	p, err := Start(bin, []string{"serve", "--config", cfgPath}, env, logPath)
	if err != nil {
		return nil, err
	}
	p.Base = "http://" + addr
	return p, nil
}

// Process is one run of the daemon.
type Process struct {
	cmd     *exec.Cmd
	LogPath string
	// Base is the daemon's HTTP base URL, when the caller set it.
	Base string
	done chan struct{}
	err  error // set when done is closed
}

// Start runs bin with args and the variables in env on top of this
// process's environment, minus any APPVIEW_ variable or armed failpoint
// of its own. stderr and stdout go to logPath.
func Start(bin string, args, env []string, logPath string) (*Process, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "APPVIEW_") || strings.HasPrefix(kv, failpoint.EnvVar+"=") {
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	p := &Process{cmd: cmd, LogPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Signal sends sig; an exited process is not an error.
func (p *Process) Signal(sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
}

// Wait waits up to timeout for the process to exit and returns how it
// ended; after the timeout it kills it and says so.
func (p *Process) Wait(timeout time.Duration) (Exit, error) {
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.Signal(syscall.SIGKILL)
		<-p.done
		return p.exit(), fmt.Errorf("did not exit within %s", timeout)
	}
	return p.exit(), nil
}

// Exit is how a process ended.
type Exit struct {
	Code   int            // exit code, -1 when killed by a signal
	Signal syscall.Signal // the signal that killed it, 0 when it exited
}

func (e Exit) String() string {
	if e.Signal != 0 {
		return fmt.Sprintf("killed by signal %d (%s)", int(e.Signal), e.Signal)
	}
	return "exit code " + strconv.Itoa(e.Code)
}

func (p *Process) exit() Exit {
	var ee *exec.ExitError
	if p.err != nil && !errors.As(p.err, &ee) {
		return Exit{Code: -1}
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		return Exit{Code: -1, Signal: ws.Signal()}
	}
	return Exit{Code: p.cmd.ProcessState.ExitCode()}
}

// Log returns what the process wrote so far.
func (p *Process) Log() string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}

// FailpointHit returns the failpoint the process announced it died at,
// or "".
func (p *Process) FailpointHit() string {
	f, err := os.Open(p.LogPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "failpoint "); ok {
			name, _, _ := strings.Cut(rest, ":")
			return name
		}
	}
	return ""
}

// RSS returns the resident set size of the process from
// /proc/<pid>/status (VmRSS), in bytes.
func RSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range bytes.Lines(b) {
		rest, ok := bytes.CutPrefix(line, []byte("VmRSS:"))
		if !ok {
			continue
		}
		f := strings.Fields(string(rest))
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("VmRSS line %q", line)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		return kb << 10, err
	}
	return 0, errors.New("no VmRSS in /proc status")
}

// WaitCursor polls the database until its stored cursor reaches t, the
// process exits, or ctx ends.
func WaitCursor(ctx context.Context, dbPath string, p *Process, t int64) error {
	for {
		c, err := ReadCursor(ctx, dbPath)
		if err == nil && c >= t {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cursor %d has not reached %d: %w", c, t, ctx.Err())
		case <-p.Done():
			return fmt.Errorf("daemon exited (%s) with the cursor at %d, before %d", p.exit(), c, t)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
