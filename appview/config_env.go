package appview

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// EnvPrefix starts every environment variable the daemon reads.
const EnvPrefix = "APPVIEW_"

// envFileOnly lists the top-level keys that only the file may set: a
// list of structs has no sensible spelling as one variable.
var envFileOnly = []string{"feeds"}

// envKey is one scalar config key that an environment variable may set.
type envKey struct {
	name  string // APPVIEW_DATABASE_PATH
	path  string // database.path
	index []int  // field index path inside Config
	typ   reflect.Type
}

// envKeys lists the settable keys in declaration order: every leaf of
// Config whose key path is not file-only, named EnvPrefix plus the key
// path in upper snake case.
func envKeys() []envKey {
	var out []envKey
	var walk func(t reflect.Type, path string, index []int)
	walk = func(t reflect.Type, path string, index []int) {
		for f := range t.Fields() {
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			p := name
			if path != "" {
				p = path + "." + name
			}
			if path == "" && slices.Contains(envFileOnly, name) {
				continue
			}
			idx := append(slices.Clone(index), f.Index...)
			if f.Type.Kind() == reflect.Struct && f.Type != durationType {
				walk(f.Type, p, idx)
				continue
			}
			out = append(out, envKey{
				name:  EnvPrefix + strings.ToUpper(strings.ReplaceAll(p, ".", "_")),
				path:  p,
				index: idx,
				typ:   f.Type,
			})
		}
	}
	walk(reflect.TypeFor[Config](), "", nil)
	return out
}

// EnvNames returns the environment variables ApplyEnv understands, in the
// order of the config file's keys.
func EnvNames() []string {
	var out []string
	for _, k := range envKeys() {
		out = append(out, k.name)
	}
	return out
}

// LoadConfigEnv is LoadConfig followed by ApplyEnv, with Validate run once
// at the end: the file overrides the defaults, the environment overrides
// the file. environ is in the form of os.Environ. Variables without the
// APPVIEW_ prefix are ignored; an unknown APPVIEW_ variable is an error.
func LoadConfigEnv(path string, environ []string) (Config, error) {
	cfg, set, err := loadUnvalidated(path, environ)
	if err != nil {
		return Config{}, err
	}
	if err := cfg.Validate(); err != nil {
		// A bad value may come from either source: say which variables
		// took part, since the messages name the file's key paths.
		switch {
		case len(set) > 0 && path != "":
			return Config{}, fmt.Errorf("config %s with environment %s: %w", path, strings.Join(set, ", "), err)
		case len(set) > 0:
			return Config{}, fmt.Errorf("config from environment %s: %w", strings.Join(set, ", "), err)
		case path != "":
			return Config{}, fmt.Errorf("config %s: %w", path, err)
		}
		return Config{}, err
	}
	return cfg, nil
}

// ListenAddress is http.listen from the file at path (if any) and the
// APPVIEW_ variables, the rest of the config unchecked: a health probe
// needs only the address, and the daemon it probes may run with a config
// the probe cannot see whole (a file it was not given), which it must
// not fail on (TestHealthNeedsOnlyTheListenAddress).
func ListenAddress(path string, environ []string) (string, error) {
	cfg, _, err := loadUnvalidated(path, environ)
	return cfg.HTTP.Listen, err
}

// loadUnvalidated reads the file at path over the defaults and applies
// the APPVIEW_ variables, returning the names of those set.
func loadUnvalidated(path string, environ []string) (Config, []string, error) {
	cfg := DefaultConfig()
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return Config{}, nil, fmt.Errorf("read config: %w", err)
		}
		cfg, err = decodeConfig(bytes.NewReader(data))
		if err != nil {
			return Config{}, nil, fmt.Errorf("config %s: %w", path, err)
		}
	}
	set, err := ApplyEnv(&cfg, environ)
	if err != nil {
		return Config{}, nil, err
	}
	return cfg, set, nil
}

// ApplyEnv sets the keys named by APPVIEW_ variables in environ on cfg,
// without validating the result. It returns the names of the variables
// it applied, sorted. Every problem is reported at once, each naming its
// variable: an unknown name, a file-only key, a malformed value.
// When environ holds a name twice the last one wins, as with os.Getenv.
func ApplyEnv(cfg *Config, environ []string) ([]string, error) {
	vars := make(map[string]string)
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if ok && strings.HasPrefix(name, EnvPrefix) {
			vars[name] = value
		}
	}
	if len(vars) == 0 {
		return nil, nil
	}
	keys := make(map[string]envKey)
	for _, k := range envKeys() {
		keys[k.name] = k
	}

	var (
		names = slices.Sorted(maps.Keys(vars))
		set   []string
		errs  []error
	)
	root := reflect.ValueOf(cfg).Elem()
	for _, name := range names {
		k, ok := keys[name]
		if !ok {
			errs = append(errs, unknownEnvError(name))
			continue
		}
		if err := setEnvValue(root.FieldByIndex(k.index), vars[name]); err != nil {
			errs = append(errs, fmt.Errorf("%s (%s): %w", name, k.path, err))
			continue
		}
		set = append(set, name)
	}
	return set, errors.Join(errs...)
}

func unknownEnvError(name string) error {
	rest := strings.ToLower(strings.TrimPrefix(name, EnvPrefix))
	for _, key := range envFileOnly {
		if rest == key || strings.HasPrefix(rest, key+"_") {
			return fmt.Errorf("%s: %s can only be configured in the config file", name, key)
		}
	}
	return fmt.Errorf("%s: unknown variable (want one of %s)", name, strings.Join(EnvNames(), ", "))
}

// setEnvValue parses one variable into a leaf field. Lists are comma
// separated; durations need a unit, as in the file. An empty value sets
// an empty string (clearing an optional URL, say) and is an error for
// anything else.
func setEnvValue(v reflect.Value, raw string) error {
	if raw == "" && v.Kind() != reflect.String {
		return errors.New("empty value; unset the variable to keep the default")
	}
	if v.Type() == durationType {
		d, err := time.ParseDuration(raw)
		if err != nil {
			return fmt.Errorf("%q: want a duration with a unit, such as 5s or 100ms", raw)
		}
		v.SetInt(int64(d))
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(raw)
	case reflect.Bool:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return fmt.Errorf("%q: want true or false", raw)
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(raw, 10, v.Type().Bits())
		if err != nil {
			return fmt.Errorf("%q: want an integer", raw)
		}
		v.SetInt(n)
	case reflect.Slice:
		if v.Type().Elem().Kind() != reflect.String {
			return fmt.Errorf("a list of %s cannot be set from the environment", v.Type().Elem())
		}
		parts := strings.Split(raw, ",")
		for i, p := range parts {
			parts[i] = strings.TrimSpace(p)
			if parts[i] == "" {
				return fmt.Errorf("%q: item %d of the comma-separated list is empty", raw, i)
			}
		}
		v.Set(reflect.ValueOf(parts).Convert(v.Type()))
	default:
		return fmt.Errorf("a %s cannot be set from the environment", v.Type())
	}
	return nil
}
