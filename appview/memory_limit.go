package appview

import (
	"log/slog"
	"math"
	"os"
	"runtime/debug"
)

// setGoLimit sets the Go runtime's soft memory limit from memory.go_limit_mb
// (Config.goLimitMB), unless GOMEMLIMIT is set in the environment: the
// runtime has read that at start, and an operator who set it (or a
// container tool deriving it from a cgroup's limit) meant it. Like the
// page slab it is per process, so the last daemon built in a process (a
// test's) sets it. It logs the limit in force; the Go collector exports
// it as go_gc_gomemlimit_bytes.
func setGoLimit(log *slog.Logger, cfg Config) {
	if env := os.Getenv("GOMEMLIMIT"); env != "" {
		log.Info("go_memory_limit", "component", "daemon", "bytes", debug.SetMemoryLimit(-1), "source", "GOMEMLIMIT")
		return
	}
	limit := int64(math.MaxInt64) // the runtime's own default: none
	if mb := cfg.goLimitMB(); mb > 0 {
		limit = int64(mb) << 20
	}
	debug.SetMemoryLimit(limit)
	log.Info("go_memory_limit", "component", "daemon", "bytes", limit, "source", "memory.go_limit_mb")
}
