// Package freshproc runs a test's body in a new copy of the test binary,
// for tests of process-wide state that must be set before anything else
// (SQLite's global configuration, which the first connection freezes).
package freshproc

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

const childEnv = "FRESHPROC_TEST"

// Run re-runs the calling test alone in a new process and fails t unless
// the child ran it and it passed. It returns true in the child, which then
// runs the test's body, and false in the parent, which returns.
//
//	if !freshproc.Run(t) {
//		return
//	}
//
// Only top-level tests: a subtest's child would run its parent's code
// first, which may be what the fresh process is meant to avoid.
func Run(t *testing.T) bool {
	t.Helper()
	if strings.Contains(t.Name(), "/") {
		t.Fatalf("freshproc.Run in subtest %s: only top-level tests can run in a fresh process", t.Name())
	}
	if os.Getenv(childEnv) == t.Name() {
		return true
	}
	ctx := t.Context()
	args := []string{"-test.run=^" + regexp.QuoteMeta(t.Name()) + "$", "-test.v"}
	if deadline, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
		args = append(args, "-test.timeout="+time.Until(deadline).Round(time.Second).String())
	}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("test in a fresh process: %v\n%s", err, out)
	}
	// A child that matched nothing, or skipped, also exits 0.
	if !strings.Contains(string(out), "--- PASS: "+t.Name()+" ") {
		t.Fatalf("test in a fresh process did not pass:\n%s", out)
	}
	return false
}
