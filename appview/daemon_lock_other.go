//go:build !(linux || darwin || freebsd || openbsd || netbsd || dragonfly)

package appview

import "os"

// tryLockFile has no advisory lock to take on this platform: the daemon,
// migrations and operator commands run unguarded, as before the locks
// existed.
func tryLockFile(*os.File, bool) (bool, error) { return true, nil }

// advisoryLocks says whether the locks exclude anyone here.
const advisoryLocks = false
