package appview

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestEnvNames(t *testing.T) {
	names := EnvNames()
	for _, want := range []string{
		"APPVIEW_DATABASE_PATH",
		"APPVIEW_JETSTREAM_URLS",
		"APPVIEW_JETSTREAM_MAX_FRAME_BYTES",
		"APPVIEW_JETSTREAM_REWIND",
		"APPVIEW_INGEST_BATCH_SIZE",
		"APPVIEW_INGEST_INDEX_ALL",
		"APPVIEW_HTTP_LISTEN",
		"APPVIEW_HTTP_ADMIN_LISTEN",
		"APPVIEW_XRPC_NAMESPACE",
		"APPVIEW_LOG_LEVEL",
	} {
		if !slices.Contains(names, want) {
			t.Errorf("EnvNames lacks %s (have %v)", want, names)
		}
	}
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			t.Errorf("two keys map to %s", n)
		}
		seen[n] = true
		if strings.HasPrefix(n, "APPVIEW_FEEDS") {
			t.Errorf("%s: feeds are file-only", n)
		}
	}
}

// Every settable key accepts its own default, printed as a user would
// write it, and ends where it started: no field of Config has a type the
// environment cannot spell.
func TestEnvRoundTripsEveryKey(t *testing.T) {
	def := reflect.ValueOf(DefaultConfig())
	for _, k := range envKeys() {
		v := def.FieldByIndex(k.index)
		var raw string
		switch {
		case v.Type() == durationType:
			raw = time.Duration(v.Int()).String()
		case v.Kind() == reflect.Slice && v.Len() == 0:
			// An empty list has no spelling: an empty variable is refused
			// (unset it to keep the default).
			continue
		case v.Kind() == reflect.Slice:
			raw = strings.Join(v.Interface().([]string), ",")
		default:
			raw = fmtValue(v)
		}
		cfg := DefaultConfig()
		set, err := ApplyEnv(&cfg, []string{k.name + "=" + raw})
		if err != nil {
			t.Errorf("%s=%s: %v", k.name, raw, err)
			continue
		}
		if !slices.Equal(set, []string{k.name}) {
			t.Errorf("%s: applied %v", k.name, set)
		}
		if !reflect.DeepEqual(cfg, DefaultConfig()) {
			t.Errorf("%s=%s changed the config", k.name, raw)
		}
	}
}

func fmtValue(v reflect.Value) string {
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	}
	return "unsupported " + v.Type().String()
}

func TestApplyEnv(t *testing.T) {
	cfg := DefaultConfig()
	set, err := ApplyEnv(&cfg, []string{
		"HOME=/root",
		"APPVIEW_DATABASE_PATH=/var/lib/appview/appview.db",
		"APPVIEW_JETSTREAM_URLS=ws://127.0.0.1:1/subscribe, ws://127.0.0.1:2/subscribe",
		"APPVIEW_JETSTREAM_REWIND=1m30s",
		"APPVIEW_JETSTREAM_COMPRESSION=false",
		"APPVIEW_INGEST_BATCH_SIZE=10",
		"APPVIEW_INGEST_BATCH_SIZE=20", // the last one wins, as with os.Getenv
		"APPVIEW_HTTP_LISTEN=127.0.0.1:9000",
		"NOT_APPVIEW_X=1",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Database.Path = "/var/lib/appview/appview.db"
	want.Jetstream.URLs = []string{"ws://127.0.0.1:1/subscribe", "ws://127.0.0.1:2/subscribe"}
	want.Jetstream.Rewind = 90 * time.Second
	want.Jetstream.Compression = false
	want.Ingest.BatchSize = 20
	want.HTTP.Listen = "127.0.0.1:9000"
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("config after env:\n got %+v\nwant %+v", cfg, want)
	}
	wantSet := []string{"APPVIEW_DATABASE_PATH", "APPVIEW_HTTP_LISTEN", "APPVIEW_INGEST_BATCH_SIZE",
		"APPVIEW_JETSTREAM_COMPRESSION", "APPVIEW_JETSTREAM_REWIND", "APPVIEW_JETSTREAM_URLS"}
	if !slices.Equal(set, wantSet) {
		t.Errorf("applied %v, want %v", set, wantSet)
	}
}

func TestApplyEnvErrors(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want string
	}{
		{"APPVIEW_DATABSE_PATH=x", "APPVIEW_DATABSE_PATH: unknown variable (want one of APPVIEW_DATABASE_PATH, "},
		{"APPVIEW_FEEDS=x", "APPVIEW_FEEDS: feeds can only be configured in the config file"},
		{"APPVIEW_FEEDS_0_NAME=x", "APPVIEW_FEEDS_0_NAME: feeds can only be configured in the config file"},
		{"APPVIEW_DATABASE=x", "APPVIEW_DATABASE: unknown variable"},
		{"APPVIEW_INGEST_BATCH_SIZE=", "APPVIEW_INGEST_BATCH_SIZE (ingest.batch_size): empty value; unset the variable to keep the default"},
		{"APPVIEW_JETSTREAM_URLS=", "APPVIEW_JETSTREAM_URLS (jetstream.urls): empty value; unset the variable to keep the default"},
		{"APPVIEW_INGEST_BATCH_SIZE=lots", `APPVIEW_INGEST_BATCH_SIZE (ingest.batch_size): "lots": want an integer`},
		{"APPVIEW_JETSTREAM_MAX_FRAME_BYTES=99999999999999999999", `APPVIEW_JETSTREAM_MAX_FRAME_BYTES (jetstream.max_frame_bytes): "99999999999999999999": want an integer`},
		{"APPVIEW_JETSTREAM_REWIND=5", `APPVIEW_JETSTREAM_REWIND (jetstream.rewind): "5": want a duration with a unit`},
		{"APPVIEW_INGEST_INDEX_ALL=yes", `APPVIEW_INGEST_INDEX_ALL (ingest.index_all): "yes": want true or false`},
		{"APPVIEW_JETSTREAM_URLS=ws://a/subscribe,,ws://b/subscribe", `APPVIEW_JETSTREAM_URLS (jetstream.urls): "ws://a/subscribe,,ws://b/subscribe": item 1 of the comma-separated list is empty`},
	} {
		t.Run(tc.env, func(t *testing.T) {
			cfg := DefaultConfig()
			_, err := ApplyEnv(&cfg, []string{tc.env})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}

	// All problems at once, in name order.
	cfg := DefaultConfig()
	_, err := ApplyEnv(&cfg, []string{"APPVIEW_ZZZ=1", "APPVIEW_INGEST_BATCH_SIZE=", "APPVIEW_AAA=1"})
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "APPVIEW_AAA:") ||
		!strings.HasPrefix(lines[1], "APPVIEW_INGEST_BATCH_SIZE ") || !strings.HasPrefix(lines[2], "APPVIEW_ZZZ:") {
		t.Fatalf("joined errors:\n%v", err)
	}
}

func TestLoadConfigEnv(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte("database:\n  path: from-file.db\nhttp:\n  listen: \"bad\"\nlog:\n  level: debug\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// The environment overrides the file and is applied before Validate:
	// the file's invalid listen address is fixed by the environment.
	cfg, err := LoadConfigEnv(path, []string{"APPVIEW_HTTP_LISTEN=127.0.0.1:0", "APPVIEW_DATABASE_PATH=from-env.db"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Database.Path != "from-env.db" || cfg.HTTP.Listen != "127.0.0.1:0" || cfg.Log.Level != "debug" {
		t.Errorf("got database.path %q, http.listen %q, log.level %q", cfg.Database.Path, cfg.HTTP.Listen, cfg.Log.Level)
	}

	// Without the fix the file's value is invalid, and the error says the
	// environment took part.
	_, err = LoadConfigEnv(path, []string{"APPVIEW_LOG_LEVEL=warn"})
	if err == nil || !strings.Contains(err.Error(), "with environment APPVIEW_LOG_LEVEL") || !strings.Contains(err.Error(), "http.listen: must be host:port") {
		t.Errorf("error %v", err)
	}
	_, err = LoadConfigEnv("", []string{"APPVIEW_JETSTREAM_URLS=http://example.com/subscribe"})
	if err == nil || !strings.Contains(err.Error(), "config from environment APPVIEW_JETSTREAM_URLS: jetstream.urls[0]") {
		t.Errorf("error %v", err)
	}

	// No file, no variables: the defaults. No APPVIEW_ variables: the
	// same as LoadConfig.
	cfg, err = LoadConfigEnv("", []string{"PATH=/bin"})
	if err != nil || !reflect.DeepEqual(cfg, DefaultConfig()) {
		t.Errorf("defaults: %+v, %v", cfg, err)
	}
	fromFile, err := LoadConfig(exampleConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err = LoadConfigEnv(exampleConfigPath, nil)
	if err != nil || !reflect.DeepEqual(cfg, fromFile) {
		t.Errorf("example file: %+v, %v", cfg, err)
	}
	if _, err := LoadConfigEnv(filepath.Join(dir, "missing.yaml"), nil); err == nil {
		t.Error("missing file: no error")
	}
}

// APPVIEW_HTTP_ADMIN_LISTEN sets http.admin_listen over the file, an
// empty value turns it off again, and a value the file's listen already
// takes is refused, naming the key and the variable.
func TestAdminListenFromEnv(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte("http:\n  listen: \"127.0.0.1:8080\"\n  admin_listen: \"127.0.0.1:9090\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfigEnv(path, nil)
	if err != nil || cfg.HTTP.AdminListen != "127.0.0.1:9090" {
		t.Fatalf("from the file: %q, %v", cfg.HTTP.AdminListen, err)
	}
	cfg, err = LoadConfigEnv(path, []string{"APPVIEW_HTTP_ADMIN_LISTEN=[::1]:9100"})
	if err != nil || cfg.HTTP.AdminListen != "[::1]:9100" {
		t.Errorf("from the environment: %q, %v", cfg.HTTP.AdminListen, err)
	}
	cfg, err = LoadConfigEnv(path, []string{"APPVIEW_HTTP_ADMIN_LISTEN="})
	if err != nil || cfg.HTTP.AdminListen != "" {
		t.Errorf("turned off by the environment: %q, %v", cfg.HTTP.AdminListen, err)
	}
	_, err = LoadConfigEnv(path, []string{"APPVIEW_HTTP_ADMIN_LISTEN=127.0.0.1:8080"})
	if err == nil || !strings.Contains(err.Error(), "with environment APPVIEW_HTTP_ADMIN_LISTEN") ||
		!strings.Contains(err.Error(), "http.admin_listen: \"127.0.0.1:8080\": must differ from http.listen") {
		t.Errorf("same as listen: %v", err)
	}
	_, err = LoadConfigEnv("", []string{"APPVIEW_HTTP_ADMIN_LISTEN=localhost"})
	if err == nil || !strings.Contains(err.Error(), "http.admin_listen: must be host:port") {
		t.Errorf("no port: %v", err)
	}
}

// An empty string is a value for a string key (clearing what the file
// set) and fails validation where the key needs one.
func TestApplyEnvEmptyString(t *testing.T) {
	cfg := DefaultConfig()
	set, err := ApplyEnv(&cfg, []string{"APPVIEW_DATABASE_PATH="})
	if err != nil || cfg.Database.Path != "" || len(set) != 1 {
		t.Fatalf("APPVIEW_DATABASE_PATH=: %v, path %q", err, cfg.Database.Path)
	}
	if _, err := LoadConfigEnv("", []string{"APPVIEW_DATABASE_PATH="}); err == nil || !strings.Contains(err.Error(), "database.path: must not be empty") {
		t.Errorf("validation: %v", err)
	}
}
