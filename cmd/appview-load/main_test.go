package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestBurstOfFirstReads is the functional version of the load run: a
// short burst of first reads from two clients while ingest runs. The
// burst gets 429s (with Retry-After) once the clients' buckets are empty,
// nothing but 200, 429 and 503, and existing viewers keep getting full
// 200s throughout. Timings are not asserted: that is what the command is
// for.
func TestBurstOfFirstReads(t *testing.T) {
	o := options{
		accounts: 30, viewers: 5, follows: 5, posts: 3, rate: 200,
		phase: 700 * time.Millisecond, rounds: 1, readers: 2, readRate: 50,
		clients: 2, burstRate: 100, burstConc: 32, seed: 1,
		dir: t.TempDir(), firstReadWait: 500 * time.Millisecond,
	}
	var out bytes.Buffer
	rep, err := run(context.Background(), o, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	b := rep.burst
	if b.statuses[429] == 0 {
		t.Errorf("no 429 in %d first reads: %v", b.requests, b.statuses)
	}
	if b.other() != 0 || b.errors != 0 || b.noRetryAfter != 0 {
		t.Errorf("burst: statuses %v, %d transport errors, %d refusals without Retry-After", b.statuses, b.errors, b.noRetryAfter)
	}
	for name, p := range map[string]phaseStats{"unloaded": rep.unloaded, "loaded": rep.loaded} {
		if p.reads == 0 || p.failed != 0 {
			t.Errorf("%s: existing viewers made %d reads, %d not a full 200", name, p.reads, p.failed)
		}
	}
	if rep.events == 0 || !strings.Contains(out.String(), "429 ") {
		t.Errorf("report:\n%s", out.String())
	}
}

func TestOptionsValidate(t *testing.T) {
	good := options{accounts: 10, viewers: 2, follows: 3, rate: 1, phase: time.Second, rounds: 1,
		readers: 1, readRate: 1, clients: 1, burstRate: 1, burstConc: 1}
	if err := good.validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []func(*options){
		func(o *options) { o.follows = 11 },
		func(o *options) { o.clients = 0 },
		func(o *options) { o.clients = 201 },
		func(o *options) { o.phase = time.Millisecond },
		func(o *options) { o.rounds = 0 },
	} {
		o := good
		bad(&o)
		if o.validate() == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}
