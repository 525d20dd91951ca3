package crashtest

import (
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/atfeeds/appview/failpoint"
)

// Stop is how one run of the daemon ends.
type Stop string

const (
	// StopKill: SIGKILL at a random moment of the run.
	StopKill Stop = "random SIGKILL"
	// StopTerm: SIGTERM at a random moment; the daemon must commit what
	// it holds and exit 0.
	StopTerm Stop = "SIGTERM"
	// StopMissed: an armed failpoint was not reached; the test killed the
	// daemon itself.
	StopMissed Stop = "failpoint missed"
)

// StopAt returns the Stop that arms failpoint name: the daemon kills
// itself there.
func StopAt(name string) Stop { return Stop("failpoint " + name) }

func (s Stop) failpoint() (string, bool) { return strings.CutPrefix(string(s), "failpoint ") }

// Env is the environment that arms the failpoint of s at its n-th hit;
// nothing for a stop that is not a failpoint.
func (s Stop) Env(n int) []string {
	name, ok := s.failpoint()
	if !ok {
		return nil
	}
	return []string{fmt.Sprintf("%s=%s:%d", failpoint.EnvVar, name, n)}
}

// failpointWait bounds how long a run armed with a failpoint may take to
// reach it.
const failpointWait = 20 * time.Second

// EndRun ends the run of p as stop says and reports where it landed: a
// kill or SIGTERM after the delay after (sooner if the process exits by
// itself, which is an error), or for a failpoint stop the process killing
// itself there. A failpoint not reached within failpointWait, or by the
// time idle is closed (the caller knows no more work will pass it; nil
// for never), is killed by the test and lands as StopMissed.
func EndRun(p *Process, stop Stop, after time.Duration, idle <-chan struct{}) (Stop, Exit, error) {
	var exit Exit
	var err error
	landed := stop
	switch stop {
	case StopKill:
		select {
		case <-time.After(after):
		case <-p.Done():
		}
		p.Signal(syscall.SIGKILL)
		exit, err = p.Wait(10 * time.Second)
		if err == nil && exit.Signal != syscall.SIGKILL {
			err = fmt.Errorf("the daemon ended by itself before the kill: %s", exit)
		}
	case StopTerm:
		select {
		case <-time.After(after):
		case <-p.Done():
		}
		p.Signal(syscall.SIGTERM)
		exit, err = p.Wait(30 * time.Second)
		if err == nil && (exit.Code != 0 || !strings.Contains(p.Log(), "appview stopped cleanly")) {
			err = fmt.Errorf("SIGTERM: %s, want a clean exit 0", exit)
		}
	default:
		name, _ := stop.failpoint()
		select {
		case <-p.Done():
		case <-idle:
		case <-time.After(failpointWait):
		}
		select {
		case <-p.Done():
			exit = p.exit()
		default:
			p.Signal(syscall.SIGKILL)
			exit, _ = p.Wait(10 * time.Second)
			if p.FailpointHit() == "" {
				return StopMissed, exit, nil
			}
		}
		if exit.Signal != syscall.SIGKILL || p.FailpointHit() != name {
			err = fmt.Errorf("armed %s: %s, announced %q", name, exit, p.FailpointHit())
		}
	}
	return landed, exit, err
}
