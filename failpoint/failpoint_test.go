package failpoint

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		name string
		n    int64
		bad  bool
	}{
		{in: "", name: "", n: 0},
		{in: "ingest.before_commit", name: "ingest.before_commit", n: 1},
		{in: "ingest.before_commit:3", name: "ingest.before_commit", n: 3},
		{in: ":3", bad: true},
		{in: "x:0", bad: true},
		{in: "x:-1", bad: true},
		{in: "x:", bad: true},
		{in: "x:two", bad: true},
	} {
		name, n, err := Parse(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("Parse(%q) = %q, %d; want an error", tc.in, name, n)
			}
			continue
		}
		if err != nil || name != tc.name || n != tc.n {
			t.Errorf("Parse(%q) = %q, %d, %v; want %q, %d", tc.in, name, n, err, tc.name, tc.n)
		}
	}
}

// TestHitKills runs this test binary again as a child that hits a point
// five times with the third hit armed: the child must die by SIGKILL after
// announcing hit 3, and never reach the fourth.
func TestHitKills(t *testing.T) {
	if os.Getenv("FAILPOINT_CHILD") == "1" {
		for i := 1; i <= 5; i++ {
			Hit("other")
			Hit("test.point")
			os.Stdout.WriteString("passed\n")
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHitKills$")
	cmd.Env = append(os.Environ(), "FAILPOINT_CHILD=1", EnvVar+"=test.point:3")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("child: %v, want it killed", err)
	}
	if ws, ok := exit.Sys().(syscall.WaitStatus); ok && (!ws.Signaled() || ws.Signal() != syscall.SIGKILL) {
		t.Errorf("child ended with %v, want SIGKILL", exit)
	}
	if got := strings.Count(stdout.String(), "passed"); got != 2 {
		t.Errorf("child passed the point %d times before dying, want 2", got)
	}
	if !strings.Contains(stderr.String(), "failpoint test.point: hit 3") {
		t.Errorf("child stderr %q does not announce hit 3", stderr.String())
	}
}

// TestBadValueExits: a mistyped point stops the process instead of
// running unarmed.
func TestBadValueExits(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), EnvVar+"=x:0")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("child: %v (%s), want exit code 2", err, out)
	}
}

func TestUnarmedHitIsCheap(t *testing.T) {
	if armed != "" {
		t.Skip("armed by the environment")
	}
	if n := testing.AllocsPerRun(100, func() { Hit(IngestBeforeCommit) }); n != 0 {
		t.Errorf("Hit allocates %v times", n)
	}
}

func BenchmarkHitUnarmed(b *testing.B) {
	for b.Loop() {
		Hit(IngestBeforeCommit)
	}
}
