// Package e2e holds the process-level tests: they build the appview binary
// the way the Dockerfile does and run it, the README's commands, a real
// Prometheus and the reference Lexicon validator against it. They are slow
// and need outside tools, so they sit behind the e2e build tag:
//
//	go test -tags e2e ./e2e
//
// Tools they need (.ci/run installs them): prometheus and promtool
// (Debian package prometheus), node with @atproto/lexicon 0.7 on NODE_PATH.
// A missing tool skips its test, except under CI=true, where it fails.
package e2e
