// Package failpoint kills the process at a named point in the code when
// the environment asks for it, so a crash test can land a SIGKILL inside a
// transaction instead of wherever a timer happens to fire (mostly between
// batches).
//
// A point is one line in the code under test:
//
//	failpoint.Hit("ingest.before_commit")
//
// and the test arms it through the environment of the process it starts:
//
//	ATFEEDS_FAILPOINT=ingest.before_commit     # kill at the first hit
//	ATFEEDS_FAILPOINT=ingest.before_commit:3   # kill at the third hit
//
// The variable does not start with APPVIEW_ because the daemon's config
// loader refuses unknown APPVIEW_ variables. It is read once, at start-up;
// when it is unset Hit is one comparison of a package variable.
package failpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
)

// EnvVar names the armed point: "name" or "name:n".
const EnvVar = "ATFEEDS_FAILPOINT"

// The points the daemon defines. Crash tests arm them by name.
const (
	// IngestBeforeCursor: a batch's changes and fan-out are written in
	// its transaction, its cursor is not.
	IngestBeforeCursor = "ingest.before_cursor"
	// IngestBeforeCommit: a batch and its cursor are written, not
	// committed.
	IngestBeforeCommit = "ingest.before_commit"
	// IngestAfterCommit: a batch is committed, the sweep tick that
	// follows it has not run.
	IngestAfterCommit = "ingest.after_commit"
	// IngestAfterCut: a catch-up's batch was committed early for an
	// urgent writer (feeds.Store.WriterWanted), with the cursor of what
	// it applied in full, and the rest of its events are held in memory.
	IngestAfterCut = "ingest.after_cut"
	// BackfillBeforePage: a listing page was fetched, its rows and page
	// cursor (one transaction) are not written.
	BackfillBeforePage = "backfill.before_page"
	// BackfillAfterPage: a listing page and its cursor are committed, the
	// next page is not fetched.
	BackfillAfterPage = "backfill.after_page"
)

// armed is the configured point, empty when none; at is the hit that
// kills (1 = the first).
var (
	armed string
	at    int64
	hits  atomic.Int64
)

func init() {
	name, n, err := Parse(os.Getenv(EnvVar))
	if err != nil {
		// A crash test that mistypes its point must not silently run
		// without it.
		fmt.Fprintf(os.Stderr, "%s: %v\n", EnvVar, err)
		os.Exit(2)
	}
	armed, at = name, n
}

// Parse reads a value of EnvVar: "" (nothing armed), "name" (the first
// hit) or "name:n" with n ≥ 1.
func Parse(v string) (name string, n int64, err error) {
	if v == "" {
		return "", 0, nil
	}
	name, count, hasCount := strings.Cut(v, ":")
	if name == "" {
		return "", 0, fmt.Errorf("%q: empty point name", v)
	}
	n = 1
	if hasCount {
		n, err = strconv.ParseInt(count, 10, 64)
		if err != nil || n < 1 {
			return "", 0, fmt.Errorf("%q: the count after ':' must be a positive integer", v)
		}
	}
	return name, n, nil
}

// Hit kills the process, at once and without cleanup (SIGKILL), when name
// is the armed point and this is the hit it waits for. Otherwise it does
// nothing.
func Hit(name string) {
	if armed != "" && name == armed {
		hit()
	}
}

func hit() {
	n := hits.Add(1)
	if n != at {
		return
	}
	// One line for the test to count where its kills landed; stderr is
	// unbuffered, so it is out before the signal.
	fmt.Fprintf(os.Stderr, "failpoint %s: hit %d, killing the process\n", armed, n)
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		_ = p.Kill() // SIGKILL on unix
	}
	// Kill is delivered asynchronously; never run past the point.
	os.Exit(137)
}
