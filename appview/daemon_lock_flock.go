//go:build linux || darwin || freebsd || openbsd || netbsd || dragonfly

package appview

import (
	"errors"
	"os"
	"syscall"
)

// advisoryLocks says whether the locks exclude anyone here.
const advisoryLocks = true

// tryLockFile takes an flock on f without waiting, exclusive or shared;
// false means another open file description holds it in a mode that
// excludes this one.
func tryLockFile(f *os.File, exclusive bool) (bool, error) {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}
