package main

import (
	"bufio"
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
)

// TestEveryTenthIsMeasured: with the daemon's default batching
// (catch-up batches up to 30,000 frames), a tenth of a 20,000-frame
// stream is smaller than one commit, so one cursor reading crosses
// several boundaries. Every tenth must still get its frames and a time
// (placed inside the commit by interpolation); closing them all at the
// reading gave the later ones 0 events and a 0% flatness (found by a
// review of the harness).
func TestEveryTenthIsMeasured(t *testing.T) {
	o := options{
		accounts: 2000, viewers: 200, follows: 50, events: 20000, seed: 1,
		phase: "ingest", dir: t.TempDir(), logLevel: "error",
	}
	var out bytes.Buffer
	if err := run(context.Background(), o, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	in := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 && f[0] == "tenth" {
			in = true
			continue
		}
		if !in || len(f) < 2 {
			continue
		}
		k, err1 := strconv.Atoi(f[0])
		ev, err2 := strconv.Atoi(f[1])
		secs, err3 := strconv.ParseFloat(f[2], 64)
		if err1 != nil || err2 != nil || err3 != nil {
			break
		}
		if ev == 0 || secs <= 0 {
			t.Errorf("tenth %d: %d events in %.2f s (a batch crossed its boundary and the one before together)", k, ev, secs)
		}
	}
	if strings.Contains(out.String(), "last tenth / first tenth = 0%") {
		t.Errorf("flatness reported as 0%%")
	}
	if t.Failed() {
		t.Logf("\n%s", out.String())
	}
}
