//go:build e2e

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxExposure bounds `systemd-analyze security` of the unit, in its
// tenths (12 is the "1.2 OK" the unit has now): dropping a hardening
// option that matters fails the test.
const maxExposure = "20"

// The example unit is valid to systemd and stays hardened. Only the
// binary's path changes: systemd-analyze checks that it exists.
func TestSystemdUnit(t *testing.T) {
	analyze := need(t, "systemd-analyze")
	unit := readFile(t, filepath.Join(repoRoot, "deploy", "appview.service"))
	const installed = "/usr/local/bin/appview"
	if !strings.Contains(unit, "ExecStart="+installed+" serve") {
		t.Fatalf("ExecStart does not run %s serve", installed)
	}
	path := filepath.Join(t.TempDir(), "appview.service")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(unit, installed, binary(t))), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(analyze, "verify", path).CombinedOutput(); err != nil {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err := exec.Command(analyze, "security", "--offline=true", "--threshold="+maxExposure, path).CombinedOutput()
	if err != nil {
		t.Errorf("systemd-analyze security above %s: %v\n%s", maxExposure, err, out)
	}
}
