package appview

import (
	"context"
	"errors"
	"testing"

	"github.com/atfeeds/appview/jetstream/jetstreamtest"
)

// A daemon holds its database: a second daemon on the same file, and
// `appview migrate`, are refused while it runs, and both go ahead once it
// has closed. (Before, migrate could not tell a running daemon was there,
// and upgraded the schema under it: left as found by the thirteenth
// session's review.)
func TestARunningDaemonHoldsItsDatabase(t *testing.T) {
	js := jetstreamtest.NewServer()
	t.Cleanup(js.Close)
	cfg := testConfig(t, js, t.TempDir()+"/appview.db")
	td := startDaemon(t, js, cfg)

	if d, err := Build(context.Background(), cfg, Options{Logger: testLogger(t)}); !errors.Is(err, errDaemonRunning) {
		if err == nil {
			d.Close(context.Background())
		}
		t.Errorf("a second daemon on the same database: %v, want it refused as running", err)
	}
	if _, _, err := MigrateStore(context.Background(), cfg); !errors.Is(err, errDaemonRunning) {
		t.Errorf("migrate beside a running daemon: %v, want it refused", err)
	}
	// Commands that run beside a daemon still open the database.
	st, err := OpenStore(context.Background(), cfg)
	if err != nil {
		t.Fatalf("an operator command beside the daemon: %v", err)
	}
	st.Close()

	td.stop()
	if _, _, err := MigrateStore(context.Background(), cfg); err != nil {
		t.Errorf("migrate after the daemon stopped: %v", err)
	}
	startDaemon(t, js, cfg) // and a daemon starts again
}
