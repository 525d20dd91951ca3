// Package dbpath finds where SQLite keeps a database given by a path that
// may be, or pass through, a symbolic link. SQLite follows every link in
// the path and keeps its -wal and -shm files beside the file the links
// lead to, so whatever looks for those files, or puts a lock beside them,
// must follow the links the same way, whether the file exists yet or not.
package dbpath

import (
	"os"
	"path/filepath"
)

// maxLinks bounds a chain of links (SQLite gives up at 100); a loop ends
// there, at a path SQLite would refuse to open anyway.
const maxLinks = 100

// Resolve returns the path of the file path leads to: the links of its
// directories resolved, then the link chain of its last element followed,
// also when the file at its end does not exist yet (filepath.EvalSymlinks
// fails there, and a lock beside the link's path would not be the one a
// later process finds beside the file). A path with no link comes back
// as it was.
func Resolve(path string) string {
	for range maxLinks {
		if dir, err := filepath.EvalSymlinks(filepath.Dir(path)); err == nil {
			path = filepath.Join(dir, filepath.Base(path))
		}
		target, err := os.Readlink(path)
		if err != nil {
			return path // not a link, or nothing there yet
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(path), target)
		}
		path = target
	}
	return path
}
