// Package realpds is an end-to-end test of the first-read backfill against
// the reference atproto PDS and did:plc directory from npm, run on loopback
// (servers.js), with the project's fake Jetstream for the live stream. It
// needs Node 20+ and the packages in package.json, so it sits behind the
// realpds build tag; run.sh installs what it needs and runs it:
//
//	e2e/realpds/run.sh
//	go test -tags realpds -count=1 ./e2e/realpds/   # once node_modules is there
package realpds
