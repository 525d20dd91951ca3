package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/atfeeds/appview/appview"
)

// daemon is the appview under load: in this process (the functional test)
// or, by default, in a child process of its own, so that the fakes and the
// load generator, which stand for the rest of the internet, do not share
// its Go scheduler and heap, and its peak RSS is its own.
type daemon interface {
	baseURL() string
	// cursorUS is the committed Jetstream cursor's time_us.
	cursorUS() int64
	// peakRSS is the daemon's high-water resident set; 0 in-process,
	// where only the whole process's is known.
	peakRSS() int64
	// cpuTime is the CPU time used so far by the daemon's process (in
	// process: by the whole process).
	cpuTime() time.Duration
	close()
}

// inProcess runs the daemon in this process.
type inProcess struct {
	d       *appview.Daemon
	base    string
	stop    context.CancelFunc
	stopped chan error
}

func startInProcess(ctx context.Context, cfg appview.Config, logger *slog.Logger) (*inProcess, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	d, err := appview.Build(ctx, cfg, appview.Options{Listener: l, Logger: logger})
	if err != nil {
		l.Close()
		return nil, err
	}
	p := &inProcess{d: d, base: "http://" + l.Addr().String(), stopped: make(chan error, 1)}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.stop = cancel
	go func() { p.stopped <- d.Run(runCtx) }()
	return p, nil
}

func (p *inProcess) baseURL() string { return p.base }
func (p *inProcess) cursorUS() int64 { return p.d.Store().Cursor().TimeUS }
func (p *inProcess) peakRSS() int64  { return 0 }

func (p *inProcess) cpuTime() time.Duration { return cpuTimeOf("self") }

func (p *inProcess) close() {
	p.stop()
	if err := <-p.stopped; err != nil {
		fmt.Fprintln(os.Stderr, "appview-load: daemon:", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.d.Close(ctx)
}

// child runs the daemon as `appview-load -daemon-config FILE`, which
// reports its address and then its cursor every cursorEvery on stdout.
type child struct {
	cmd    *exec.Cmd
	base   string
	cursor atomic.Int64
	done   chan struct{}
}

const cursorEvery = 10 * time.Millisecond

func startChild(ctx context.Context, cfg appview.Config, dir string, verbose bool) (*child, error) {
	yml, err := cfg.MarshalRedactedYAML()
	if err != nil {
		return nil, err
	}
	path := dir + "/appview-load.yaml"
	if err := os.WriteFile(path, yml, 0o600); err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"-daemon-config", path}
	if verbose {
		args = append(args, "-v")
	}
	c := &child{cmd: exec.Command(exe, args...), done: make(chan struct{})}
	c.cmd.Stderr = os.Stderr
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		c.cmd.Process.Kill()
		c.cmd.Wait()
		return nil, errors.New("the daemon process exited before it listened")
	}
	addr, ok := strings.CutPrefix(sc.Text(), "listen ")
	if !ok {
		c.cmd.Process.Kill()
		c.cmd.Wait()
		return nil, fmt.Errorf("daemon process said %q", sc.Text())
	}
	c.base = "http://" + addr
	go func() {
		defer close(c.done)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "cursor "); ok {
				if n, err := strconv.ParseInt(v, 10, 64); err == nil {
					c.cursor.Store(n)
				}
			}
		}
	}()
	return c, nil
}

func (c *child) baseURL() string { return c.base }
func (c *child) cursorUS() int64 { return c.cursor.Load() }
func (c *child) peakRSS() int64  { return peakRSSOf(strconv.Itoa(c.cmd.Process.Pid)) }

func (c *child) cpuTime() time.Duration { return cpuTimeOf(strconv.Itoa(c.cmd.Process.Pid)) }

func (c *child) close() {
	c.cmd.Process.Signal(os.Interrupt)
	select {
	case <-c.done:
	case <-time.After(15 * time.Second):
		c.cmd.Process.Kill()
	}
	if err := c.cmd.Wait(); err != nil {
		fmt.Fprintln(os.Stderr, "appview-load: daemon process:", err)
	}
}

// serveDaemon is the child's side: run the daemon on the config file
// until ctx ends, reporting on out.
func serveDaemon(ctx context.Context, path string, verbose bool, out io.Writer) error {
	cfg, err := appview.LoadConfig(path)
	if err != nil {
		return err
	}
	p, err := startInProcess(ctx, cfg, daemonLogger(verbose))
	if err != nil {
		return err
	}
	defer p.close()
	if _, err := fmt.Fprintf(out, "listen %s\n", strings.TrimPrefix(p.base, "http://")); err != nil {
		return err
	}
	t := time.NewTicker(cursorEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if _, err := fmt.Fprintf(out, "cursor %d\n", p.cursorUS()); err != nil {
				return err
			}
		}
	}
}

func daemonLogger(verbose bool) *slog.Logger {
	if verbose {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.DiscardHandler)
}
