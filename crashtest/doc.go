// Package crashtest proves the daemon's crash safety from the outside: it
// builds the real binary, feeds it a generated Jetstream log from a fake
// server in the test process, kills it (SIGKILL at random times and at the
// failpoints of package failpoint, SIGTERM, dropped connections), restarts
// it on the same database, and compares what the database and getFeed hold
// with a model computed independently from the log.
//
// The tests are slow and sit behind the crash build tag (.ci/crash.sh):
//
//	go test -tags crash -count=1 -v ./crashtest
//
// The memory soak is a command: go run ./crashtest/soak -events 1000000.
package crashtest
