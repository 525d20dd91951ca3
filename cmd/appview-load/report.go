package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// phaseStats is what the existing viewers saw in one phase.
type phaseStats struct {
	reads, failed  int // failed: an error, a non-200 or an empty feed
	p50, p99, max  time.Duration
	lagP50, lagMax time.Duration // ingest lag: wall clock minus the committed cursor
	cores          float64       // the daemon's CPU time over wall time
}

// burstStats is what the burst clients got.
type burstStats struct {
	requests     int
	statuses     map[int]int
	errors       int // transport errors
	noRetryAfter int // 429s and 503s without Retry-After
	dropped      int // requests the clients could not send (all in flight)
	p50, p99     time.Duration
}

func (b burstStats) share(status int) float64 {
	if b.requests == 0 {
		return 0
	}
	return 100 * float64(b.statuses[status]) / float64(b.requests)
}

// other counts answers that are none of 200, 429, 503.
func (b burstStats) other() int {
	n := 0
	for s, c := range b.statuses {
		if s != 200 && s != 429 && s != 503 {
			n += c
		}
	}
	return n
}

type report struct {
	unloaded, loaded phaseStats
	burst            burstStats
	events           int
	lastTimeUS       int64
	feedSeconds      float64
	catchUp          time.Duration
	peakRSS          int64  // this process, bytes; 0 when unknown
	daemonRSS        int64  // the daemon process, when separate
	cpuOf            string // whose CPU the phases count
}

// p99Ratio is the loaded p99 over the unloaded one.
func (r *report) p99Ratio() float64 {
	if r.unloaded.p99 <= 0 {
		return 0
	}
	return float64(r.loaded.p99) / float64(r.unloaded.p99)
}

func (r *report) print(out io.Writer, o options) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
	fmt.Fprintf(out, "setup: %d accounts × %d posts, %d existing viewers × %d follows; Jetstream at %d events/s; existing viewers read %d/s; %d rounds of an unloaded and a loaded phase of %s\n",
		o.accounts, o.posts, o.viewers, o.follows, o.rate, o.readRate, o.rounds, o.phase)
	for _, p := range []struct {
		name string
		s    phaseStats
	}{{"unloaded", r.unloaded}, {"loaded", r.loaded}} {
		fmt.Fprintf(out, "%-8s existing viewers: %d reads, %d failed, p50 %s, p99 %s, max %s; ingest lag p50 %s, max %s; %s CPU %.2f cores\n",
			p.name, p.s.reads, p.s.failed, ms(p.s.p50), ms(p.s.p99), ms(p.s.max), ms(p.s.lagP50), ms(p.s.lagMax), r.cpuOf, p.s.cores)
	}
	verdict := "within"
	if r.p99Ratio() > 2 {
		verdict = "NOT within"
	}
	fmt.Fprintf(out, "existing viewers' p99 loaded/unloaded: %.2f× (%s the 2× target)\n", r.p99Ratio(), verdict)
	b := r.burst
	fmt.Fprintf(out, "burst: %d first reads for new actors from %d clients at %d/s each: 200 %d (%.1f%%), 429 %d (%.1f%%), 503 %d (%.1f%%), other %d, transport errors %d, without Retry-After %d, not sent (client at %d in flight) %d; p50 %s, p99 %s\n",
		b.requests, o.clients, o.burstRate, b.statuses[200], b.share(200), b.statuses[429], b.share(429), b.statuses[503], b.share(503),
		b.other(), b.errors, b.noRetryAfter, o.burstConc, b.dropped, ms(b.p50), ms(b.p99))
	fmt.Fprintf(out, "ingest: %d events in %.0fs (%.0f/s); caught up %s after the feed stopped\n",
		r.events, r.feedSeconds, float64(r.events)/r.feedSeconds, ms(r.catchUp))
	switch {
	case r.daemonRSS > 0:
		fmt.Fprintf(out, "peak RSS: daemon process %.0f MiB; fakes and load generator %.0f MiB\n", float64(r.daemonRSS)/(1<<20), float64(r.peakRSS)/(1<<20))
	case r.peakRSS > 0:
		fmt.Fprintf(out, "peak RSS: %.0f MiB (daemon, fakes and load generator in one process)\n", float64(r.peakRSS)/(1<<20))
	default:
		fmt.Fprintln(out, "peak RSS: unknown (no /proc/self/status)")
	}
}

// percentiles returns the p50, p99 and max of ds (zeros when empty).
func percentiles(ds []time.Duration) (p50, p99, maxD time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return at(0.50), at(0.99), s[len(s)-1]
}

// cpuTimeOf is a process's user and system CPU time so far, by pid or
// "self"; 0 when the system does not say.
func cpuTimeOf(pid string) time.Duration {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: utime and stime are the 12th and 13th, in clock ticks.
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	const ticksPerSecond = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticksPerSecond
}

// peakRSSOf is a process's high-water resident set (VmHWM), by pid or
// "self"; 0 when the system does not say.
func peakRSSOf(pid string) int64 {
	f, err := os.Open("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
