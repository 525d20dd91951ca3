//go:build linux

package appview

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/atfeeds/appview/feeds"
)

// The daemon lock file outlives the process that made it, so it is often
// made by another user than the daemon's: `appview migrate` run with sudo
// on the upgrade (the README's order: stop the daemon, migrate, start the
// new build) leaves a root-owned file of mode 0644 beside the database.
// Opened for writing, it kept the daemon from ever starting again
// ("open daemon lock: permission denied"), where SQLite's own -wal and
// -shm files are removed when the command closes. An flock needs no write
// access.
func TestTheDaemonLockIsTakenThoughAnotherUserMadeItsFile(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "appview.db")
	lock, err := lockDaemon(db) // the operator's command, as this user
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.release(); err != nil {
		t.Fatal(err)
	}
	// The daemon's user may enter the directory, not write the file.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	asAnotherUser(t, db+".lock", func() {
		l, err := lockDaemon(db)
		if err != nil {
			t.Fatalf("a daemon whose user cannot write the lock file: %v, want it to take the lock", err)
		}
		defer l.release()
		if _, err := lockDaemon(db); !errors.Is(err, errDaemonRunning) {
			t.Errorf("a second daemon beside it: %v, want %v", err, errDaemonRunning)
		}
	})
}

// asAnotherUser runs fn with file access to path checked as a user who
// may read it but not write it: as root, on a thread whose filesystem uid
// is nobody's (65534) for fn, which drops root's capability to override
// file permissions; as any other user, with path made read-only, which its
// owner cannot write either.
func asAnotherUser(t *testing.T, path string, fn func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(path, 0o444); err != nil {
			t.Fatal(err)
		}
		fn()
		return
	}
	probe := filepath.Join(t.TempDir(), "probe") // a directory only root may write
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	syscall.Setfsuid(65534)
	defer syscall.Setfsuid(0)
	if f, err := os.OpenFile(probe, os.O_RDWR|os.O_CREATE, 0o644); err == nil {
		f.Close()
		t.Fatal("setfsuid did not drop root's file access")
	}
	fn()
}

// SQLite follows a symbolic link to the database file and keeps its -wal
// and -shm files beside the file it reaches, so a command given the
// link's path opens the daemon's database. The lock must be the same
// file too: beside the link, `appview migrate` through it was not
// refused while the daemon ran on the file's own path.
func TestTheDaemonLockIsBesideTheFileADatabasePathLinksTo(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "data", "appview.db")
	if err := os.Mkdir(filepath.Dir(db), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(db, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "appview.db")
	if err := os.Symlink(db, link); err != nil {
		t.Fatal(err)
	}
	l, err := lockDaemon(db)
	if err != nil {
		t.Fatal(err)
	}
	defer l.release()
	if other, err := lockDaemon(link); !errors.Is(err, errDaemonRunning) {
		other.release()
		t.Errorf("the lock through a link to the database: %v, want %v", err, errDaemonRunning)
	}
}

// The same when the link was made before the database: resolved only once
// the file existed, the first daemon locked beside the link, SQLite then
// made the file at the link's target, and every later process, resolving
// the link, locked beside that file, which nobody held: a second daemon,
// or `appview migrate`, ran beside the first (a review).
func TestTheDaemonLockFollowsALinkMadeBeforeTheDatabase(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "data", "appview.db")
	if err := os.Mkdir(filepath.Dir(db), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "appview.db")
	if err := os.Symlink(db, link); err != nil {
		t.Fatal(err)
	}
	first, err := lockDaemon(link)
	if err != nil {
		t.Fatal(err)
	}
	defer first.release()
	s, err := feeds.Open(context.Background(), feeds.Options{Path: link})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := os.Stat(db); err != nil {
		t.Fatalf("setup: the database was not made at the link's target: %v", err)
	}
	for _, path := range []string{link, db} {
		if other, err := lockDaemon(path); !errors.Is(err, errDaemonRunning) {
			other.release()
			t.Errorf("the lock through %s: %v, want %v", path, err, errDaemonRunning)
		}
	}
}
