#!/usr/bin/env bash
# Crash-safety proof and memory soak (docs/cursors.md, "Proof under
# faults"): crashtest/ kills the real binary at random moments and at
# failpoints, drops its Jetstream connection, stops it with SIGTERM
# mid-batch, and compares every feed with a model of the log; it also kills
# it during first reads from fake PDSes (TestCrashFirstRead) and compares
# every feed and listing cursor with the PDS contents, and right after
# first reads cut a catch-up's batch (TestCrashFirstReadsDuringACatchUp),
# comparing every feed with the whole log's; the soak
# streams events through the daemon and fails if its memory grows. Needs
# only Go. Both steps run even if the first fails.
set -uo pipefail
cd "$(dirname "$0")/.."
step() { echo "== $* (at ${SECONDS}s)"; }
failed=()

step "crash tests (go test -tags crash ./crashtest)"
go test -tags crash -count=1 -timeout 15m -v ./crashtest || failed+=("crash tests")

# The short soak: 100k warm-up events (SQLite's page caches fill while the
# file is small), then 100k measured ones. The full run is
# `go run ./crashtest/soak` (a million events, about 3.5 minutes).
step "soak, short (go run ./crashtest/soak, no -race)"
go run ./crashtest/soak -events 100000 -warmup 100000 -accounts 10000 -viewers 2000 || failed+=("soak")

step "done"
if ((${#failed[@]})); then
    echo "FAILED: ${failed[*]}"
    exit 1
fi
