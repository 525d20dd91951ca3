package appview

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/atfeeds/appview/directory"
)

// A pause the PLC directory or the handle resolver asks for is counted
// by service, with no URL or DID in the labels, and logged once.
func TestIdentityPausesAreCountedAndLogged(t *testing.T) {
	reg := prometheus.NewRegistry()
	var logs bytes.Buffer
	onPause := identityPauses(reg, slog.New(slog.NewTextHandler(&logs, nil)))
	onPause(directory.ServicePLC, 429, 7*time.Second)
	onPause(directory.ServicePLC, 503, 5*time.Second)
	onPause(directory.ServiceHandleResolver, 429, time.Minute)
	want := `
# HELP appview_identity_pauses_total Pauses of identity lookups asked for by a 429 or 503 of the PLC directory or the handle resolver, by service (plc, handle_resolver).
# TYPE appview_identity_pauses_total counter
appview_identity_pauses_total{service="handle_resolver"} 1
appview_identity_pauses_total{service="plc"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "appview_identity_pauses_total"); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "identity lookups paused"); n != 3 {
		t.Fatalf("%d log lines, want one a pause:\n%s", n, logs.String())
	}
}
