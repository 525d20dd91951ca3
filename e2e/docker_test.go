//go:build e2e

package e2e

import (
	"debug/elf"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/atfeeds/appview/jetstream/jetstreamtest"
)

// There is no Docker engine here, so this test checks the Dockerfile's
// promises on the binary its own build command produces: static and
// trimmed, version and commit stamped, and the image's entrypoint,
// working directory and HEALTHCHECK working as the image would run them.
func TestDockerfileBinary(t *testing.T) {
	bin := binary(t)
	instrs := dockerInstructions(readFile(t, filepath.Join(repoRoot, "Dockerfile")))

	// The flags really reached the binary.
	settings := buildSettings(t, bin)
	for k, want := range map[string]string{"CGO_ENABLED": "0", "-trimpath": "true"} {
		if settings[k] != want {
			t.Errorf("build setting %s = %q, want %q (settings %v)", k, settings[k], want, settings)
		}
	}
	// Go does not record -ldflags under -trimpath; their effects are
	// checked instead: no symbol table (-s -w) here, -X in `version`.
	assertStatic(t, bin)

	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := "version: " + testVersion + "\ncommit: " + testCommit + "\ngo: go"; !strings.HasPrefix(string(out), want) {
		t.Errorf("version printed %q, want it to start with %q", out, want)
	}

	// The runtime stage: non-root, a data volume as the working directory,
	// the port, and exec-form entrypoint, command and health check.
	final := instrs[slices.IndexFunc(instrs, func(s string) bool { return strings.HasPrefix(s, "FROM gcr.io/distroless/static") }):]
	for _, want := range []string{"USER nonroot:nonroot", "WORKDIR /data", "VOLUME /data", "EXPOSE 8080"} {
		if !slices.Contains(final, want) {
			t.Errorf("runtime stage lacks %q", want)
		}
	}
	entrypoint := execForm(t, final, "ENTRYPOINT ")
	command := execForm(t, final, "CMD ")
	healthcheck := execForm(t, final, "HEALTHCHECK ")
	if entrypoint[0] != "/usr/local/bin/appview" || healthcheck[0] != "/usr/local/bin/appview" {
		t.Fatalf("entrypoint %v, health check %v: want the binary at /usr/local/bin/appview", entrypoint, healthcheck)
	}

	// Run the image's command as the image would: from an empty working
	// directory standing in for /data, configured by environment only.
	js := jetstreamtest.NewServer()
	defer js.Close()
	addr := freeAddr(t)
	dataDir := t.TempDir()
	env := cleanEnv(append(offlineEnv(t, bin), "APPVIEW_JETSTREAM_URLS="+js.URL(), "APPVIEW_HTTP_LISTEN="+addr)...)
	serve := exec.Command(bin, append(entrypoint[1:], command...)...)
	serve.Dir, serve.Env = dataDir, env
	p := start(t, serve)

	// The HEALTHCHECK command, with the container's environment: it fails
	// while nothing listens and passes once the daemon is up.
	probe := func() error {
		hc := exec.Command(bin, healthcheck[1:]...)
		hc.Env = env
		out, err := hc.CombinedOutput()
		if err != nil {
			return errors.New(strings.TrimSpace(string(out)))
		}
		return nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := probe()
		if err == nil {
			break
		}
		if p.exited() || time.Now().After(deadline) {
			t.Fatalf("health check never passed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !js.WaitConnections(1, 30*time.Second) {
		t.Fatal("daemon did not subscribe")
	}
	ready := waitStatus(t, p, "http://"+addr+"/readyz", http.StatusOK, 30*time.Second)
	var r struct{ Status string }
	if err := json.Unmarshal(ready, &r); err != nil || r.Status != "ready" {
		t.Errorf("/readyz: %s", ready)
	}

	// docker stop sends SIGTERM: a clean exit, the database in /data.
	if err := p.stop(t, syscall.SIGTERM, 20*time.Second); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "appview.db")); err != nil {
		t.Errorf("database not in the working directory: %v", err)
	}
	if err := probe(); err == nil {
		t.Error("health check passes with the daemon stopped")
	}
}

// execForm returns the JSON array of the one instruction with prefix,
// such as CMD ["serve"] or HEALTHCHECK --interval=30s CMD [...].
func execForm(t *testing.T, instrs []string, prefix string) []string {
	t.Helper()
	var found []string
	for _, in := range instrs {
		rest, ok := strings.CutPrefix(in, prefix)
		if !ok {
			continue
		}
		if found != nil {
			t.Fatalf("two %sinstructions", prefix)
		}
		i := strings.Index(rest, "[")
		if i < 0 {
			t.Fatalf("%s%s: want the exec form, a JSON array", prefix, rest)
		}
		if err := json.Unmarshal([]byte(rest[i:]), &found); err != nil || len(found) == 0 {
			t.Fatalf("%s%s: %v", prefix, rest, err)
		}
	}
	if found == nil {
		t.Fatalf("no %sinstruction in the runtime stage", prefix)
	}
	return found
}

// assertStatic fails unless bin is a statically linked, stripped ELF: no
// program interpreter and no shared libraries, so it runs on
// distroless/static.
func assertStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("binary is dynamically linked (%v)", p.Type)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("binary needs shared libraries %v", libs)
	}
	if _, err := f.Symbols(); !errors.Is(err, elf.ErrNoSymbols) {
		t.Errorf("binary has a symbol table (built without -s?): %v", err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
