package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// profiler takes a CPU profile of the first loaded phase only: a CPU
// profile cannot be paused, and one phase is representative.
type profiler struct {
	f    *os.File
	done bool
}

func newProfiler(path string) (*profiler, error) {
	if path == "" {
		return &profiler{done: true}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return &profiler{f: f}, nil
}

func (p *profiler) start() {
	if p.done {
		return
	}
	if err := pprof.StartCPUProfile(p.f); err != nil {
		fmt.Fprintln(os.Stderr, "appview-load: cpu profile:", err)
		p.done = true
	}
}

func (p *profiler) stop() {
	if p.done {
		return
	}
	pprof.StopCPUProfile()
	p.done = true
}

func (p *profiler) write() error {
	if p.f == nil {
		return nil
	}
	return p.f.Close()
}
