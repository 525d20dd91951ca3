package appview

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// exampleKey is one leaf key of config.example.yaml, with the comment
// that documents it.
type exampleKey struct {
	path    string // as validation errors name it: feeds[0].targets[0].cap
	comment string
	typ     reflect.Type
}

// exampleKeys walks config.example.yaml alongside Config and returns its
// leaf keys. It fails t for every key of Config the example does not show
// where it belongs: a key written in the wrong section, or only mentioned
// in another key's comment, would otherwise be found by a search of the
// text and its default never checked. A list the example only shows
// commented out (a target's fields) is read from the comment.
func exampleKeys(t *testing.T) []exampleKey {
	t.Helper()
	data, err := os.ReadFile(exampleConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	var keys []exampleKey
	var walk func(n *yaml.Node, typ reflect.Type, path, comment string)
	walkMappings := func(ns []*yaml.Node, typ reflect.Type, paths []string) {
		// The keys of a list's elements: each key shown in one of them
		// at least (an equality field has no type, a range field has).
		_, names := yamlFields(typ)
		for _, name := range names {
			shown := slices.ContainsFunc(ns, func(n *yaml.Node) bool { return mappingValue(n, name) != nil })
			if !shown && !commentedList(t, ns, typ, name, paths, walk) {
				t.Errorf("config.example.yaml: %s lacks key %q", strings.Join(paths, ", "), name)
			}
		}
		for i, n := range ns {
			for j := 0; j+1 < len(n.Content); j += 2 {
				k, v := n.Content[j], n.Content[j+1]
				comment := k.HeadComment
				if j == 0 && comment == "" {
					comment = n.HeadComment // a list element's first key
				}
				fields, _ := yamlFields(typ)
				if ft, ok := fields[k.Value]; ok {
					walk(v, ft, joinKey(paths[i], k.Value), comment)
				}
			}
		}
	}
	walk = func(n *yaml.Node, typ reflect.Type, path, comment string) {
		switch {
		case typ.Kind() == reflect.Struct && typ != durationType:
			if n.Kind != yaml.MappingNode {
				t.Errorf("config.example.yaml: %s is not a mapping", path)
				return
			}
			walkMappings([]*yaml.Node{n}, typ, []string{path})
		case typ.Kind() == reflect.Slice && typ.Elem().Kind() == reflect.Struct:
			var paths []string
			for i := range n.Content {
				paths = append(paths, fmt.Sprintf("%s[%d]", path, i))
			}
			if len(n.Content) == 0 {
				t.Errorf("config.example.yaml: %s shows no element", path)
				return
			}
			walkMappings(n.Content, typ.Elem(), paths)
		default:
			keys = append(keys, exampleKey{path: path, comment: comment, typ: typ})
		}
	}
	walk(doc.Content[0], reflect.TypeFor[Config](), "", "")
	return keys
}

// commentedList reports whether the mappings ns show the list key name
// commented out ("# fields:" and its lines), and walks it if so.
func commentedList(t *testing.T, ns []*yaml.Node, typ reflect.Type, name string, paths []string,
	walk func(*yaml.Node, reflect.Type, string, string)) bool {
	fields, _ := yamlFields(typ)
	if fields[name].Kind() != reflect.Slice {
		return false
	}
	for i, n := range ns {
		var text []string
		for _, c := range n.Content {
			text = append(text, c.HeadComment, c.LineComment, c.FootComment)
		}
		lines := strings.Split(strings.Join(text, "\n"), "\n")
		start := slices.Index(lines, "# "+name+":")
		if start < 0 {
			continue
		}
		var block []string
		for _, l := range lines[start:] {
			if !strings.HasPrefix(l, "# ") {
				break
			}
			block = append(block, strings.TrimPrefix(l, "# "))
		}
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte(strings.Join(block, "\n")), &doc); err != nil {
			t.Errorf("config.example.yaml: commented-out %s: %v", joinKey(paths[i], name), err)
			return true
		}
		walk(doc.Content[0].Content[1], fields[name], joinKey(paths[i], name), "")
		return true
	}
	return false
}

func mappingValue(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// Every key of Config is shown in its place in the example file, so a
// new field cannot be added without documenting it, and
// TestExampleConfigIsDefault checks every default.
func TestExampleConfigNamesEveryKey(t *testing.T) {
	var leaves []string
	for _, k := range exampleKeys(t) {
		if !strings.Contains(k.path, "[") {
			leaves = append(leaves, k.path)
		}
	}
	// The environment's keys are every scalar leaf outside the lists.
	var want []string
	for _, k := range envKeys() {
		want = append(want, k.path)
	}
	slices.Sort(leaves)
	slices.Sort(want)
	if !slices.Equal(leaves, want) {
		t.Errorf("config.example.yaml shows\n%q\nthe environment's keys are\n%q", leaves, want)
	}
}

// Stated bounds in the example's comments, such as "(1 to 1024)",
// "(> 0)", "(>= 0)", "at least 100ms" and "at most 2s".
var (
	boundRange    = regexp.MustCompile(`\((-?\d+) to (\d+)\b`)
	boundAtLeast  = regexp.MustCompile(`at least (\d+[a-zµ]*)`)
	boundAtMost   = regexp.MustCompile(`at most (\d+[a-zµ]*)`)
	boundPositive = regexp.MustCompile(`\(> 0\b|, > 0\b`)
	boundNonNeg   = regexp.MustCompile(`\(>= 0\b`)
)

// TestExampleConfigStatesTrueBounds holds the example's comments to what
// Validate does: every number and duration states its bounds, and each
// bound is the one validation draws (the value on the bound is accepted,
// one past it refused).
func TestExampleConfigStatesTrueBounds(t *testing.T) {
	for _, k := range exampleKeys(t) {
		isDuration := k.typ == durationType
		if k.typ.Kind() != reflect.Int && k.typ.Kind() != reflect.Int64 {
			continue
		}
		parse := func(s string) int64 {
			t.Helper()
			if isDuration {
				d, err := time.ParseDuration(s)
				if err != nil {
					t.Fatalf("%s: comment's bound %q: %v", k.path, s, err)
				}
				return int64(d)
			}
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				t.Fatalf("%s: comment's bound %q: %v", k.path, s, err)
			}
			return n
		}
		comment := strings.ReplaceAll(k.comment, "\n# ", " ")
		stated := false
		check := func(bound string, v int64, valid bool) {
			t.Helper()
			stated = true
			if got := validField(t, k.path, v); got != valid {
				t.Errorf("%s: the example says %q, but %v is valid=%v", k.path, bound, v, got)
			}
		}
		if m := boundRange.FindStringSubmatch(comment); m != nil {
			lo, hi := parse(m[1]), parse(m[2])
			check(m[0], lo, true)
			check(m[0], lo-1, false)
			check(m[0], hi, true)
			check(m[0], hi+1, false)
		}
		if m := boundAtLeast.FindStringSubmatch(comment); m != nil {
			lo := parse(m[1])
			check(m[0], lo, true)
			check(m[0], lo-1, false)
		}
		if m := boundAtMost.FindStringSubmatch(comment); m != nil {
			hi := parse(m[1])
			check(m[0], hi, true)
			check(m[0], hi+1, false)
		}
		if boundPositive.MatchString(comment) {
			check("> 0", 0, false)
		}
		if boundNonNeg.MatchString(comment) {
			check(">= 0", 0, true)
			check(">= 0", -1, false)
		}
		if !stated {
			t.Errorf("%s: the example's comment states no bounds: %q", k.path, k.comment)
		}
	}
}

// validField reports whether DefaultConfig with the integer or duration
// at path set to v passes Validate as far as that key is concerned.
func validField(t *testing.T, path string, v int64) bool {
	t.Helper()
	cfg := DefaultConfig()
	field := reflect.ValueOf(&cfg).Elem()
	for seg := range strings.SplitSeq(path, ".") {
		name, idx, isElem := strings.Cut(seg, "[")
		field = fieldByKey(t, field, name)
		if isElem {
			i, err := strconv.Atoi(strings.TrimSuffix(idx, "]"))
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			field = field.Index(i)
		}
	}
	field.SetInt(v)
	err := cfg.Validate()
	if err == nil {
		return true
	}
	for line := range strings.SplitSeq(err.Error(), "\n") {
		if strings.HasPrefix(line, path+":") {
			return false
		}
	}
	return true
}

func fieldByKey(t *testing.T, v reflect.Value, key string) reflect.Value {
	t.Helper()
	for f := range v.Type().Fields() {
		if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name == key {
			return v.FieldByIndex(f.Index)
		}
	}
	t.Fatalf("%s has no key %q", v.Type(), key)
	return reflect.Value{}
}
