package appview

import (
	"runtime"
	"runtime/debug"
)

// Commit is the VCS revision the daemon was built from, set at build time
// with -ldflags "-X github.com/atfeeds/appview/appview.Commit=…" (the
// Dockerfile does). When it is empty, BuildCommit falls back to the
// revision the go command stamps into binaries built in a git checkout.
var Commit = ""

// BuildCommit is the commit this binary was built from: Commit if set,
// else the stamped VCS revision (with "-dirty" when the work tree had
// changes), else "unknown" (go run, go test, a build outside git).
func BuildCommit() string {
	if Commit != "" {
		return Commit
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return "unknown"
	}
	if modified == "true" {
		rev += "-dirty"
	}
	return rev
}

// GoVersion is the Go toolchain the binary was built with.
func GoVersion() string { return runtime.Version() }
