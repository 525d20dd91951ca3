// Package freshproc runs a test's body in a new copy of the test binary,
// for tests of process-wide state that must be set before anything else
// (SQLite's global configuration, which the first connection freezes).
package freshproc

import (
	"os"
	"os/exec"
	"testing"
)

const childEnv = "FRESHPROC_TEST"

// Run re-runs the calling test alone in a new process and fails t with the
// child's output if the child fails. It returns true in the child, which
// then runs the test's body, and false in the parent, which returns.
//
//	if !freshproc.Run(t) {
//		return
//	}
func Run(t *testing.T) bool {
	t.Helper()
	if os.Getenv(childEnv) == t.Name() {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("test in a fresh process: %v\n%s", err, out)
	}
	return false
}
