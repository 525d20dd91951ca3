package appview

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// checkDocument walks a YAML document alongside the Go type it will be
// decoded into and reports, with the full key path and line:
//   - unknown and duplicate keys;
//   - empty (null) values, which yaml.v3 would silently turn into zero
//     values (a bare "merge_limit:" would mean 0, "compression:" false);
//   - durations without a unit, or that time.ParseDuration refuses
//     (5sec, 3000000h), which yaml.v3 rejects only with a Go type name in
//     the message;
//   - a number that is not an integer, or a boolean other than true and
//     false, where the decoder would truncate it or read yes as true;
//   - a mapping where a list or value belongs, and so on.
//
// Other value syntax is left to the decoder.
func checkDocument(doc *yaml.Node, t reflect.Type) error {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil
	}
	root := doc.Content[0]
	if isNull(root) {
		return nil // a document of only "---" or "~": the defaults
	}
	c := keyChecker{seen: make(map[seenNode]bool)}
	c.check(root, t, "")
	return errors.Join(c.errs...)
}

type keyChecker struct {
	// seen holds aliased nodes already checked as a type, so anchors
	// reused many times (an alias bomb) are walked once.
	seen map[seenNode]bool
	errs []error
}

type seenNode struct {
	node *yaml.Node
	typ  reflect.Type
}

var durationType = reflect.TypeFor[time.Duration]()

func (c *keyChecker) fail(n *yaml.Node, path, format string, args ...any) {
	if path == "" {
		path = "config"
	}
	c.errs = append(c.errs, fmt.Errorf("line %d: %s: %s", n.Line, path, fmt.Sprintf(format, args...)))
}

func (c *keyChecker) check(n *yaml.Node, t reflect.Type, path string) {
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			return // the decoder reports it
		}
		n = n.Alias
		k := seenNode{n, t}
		if c.seen[k] {
			return
		}
		c.seen[k] = true
	}
	if isNull(n) {
		c.fail(n, path, "empty value; leave the key out to keep its default")
		return
	}
	switch {
	case t == durationType:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
			c.fail(n, path, "want a duration with a unit, such as 5s or 100ms")
		} else if _, err := time.ParseDuration(n.Value); err != nil {
			// The decoder's own message names the Go type, not the key.
			c.fail(n, path, "%q: want a duration with a unit, such as 5s or 100ms", n.Value)
		}
	case t.Kind() == reflect.Struct:
		if n.Kind != yaml.MappingNode {
			c.fail(n, path, "want a mapping, got %s", describe(n))
			return
		}
		c.checkMapping(n, t, path)
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			c.fail(n, path, "want a list, got %s", describe(n))
			return
		}
		for i, e := range n.Content {
			c.check(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	default:
		if n.Kind != yaml.ScalarNode {
			c.fail(n, path, "want a single value, got %s", describe(n))
			return
		}
		// The decoder would truncate 0.5 to 0 in an integer field, and
		// take yes/on for true: the environment refuses both, so the file
		// does too.
		switch t.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			if n.ShortTag() != "!!int" {
				c.fail(n, path, "%q: want an integer", n.Value)
			}
		case reflect.Bool:
			if n.ShortTag() != "!!bool" {
				c.fail(n, path, "%q: want true or false", n.Value)
			}
		}
	}
}

func (c *keyChecker) checkMapping(n *yaml.Node, t reflect.Type, path string) {
	fields, names := yamlFields(t)
	firstLine := make(map[string]int)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			c.fail(k, path, "keys must be plain strings")
			continue
		}
		p := k.Value
		if path != "" {
			p = path + "." + k.Value
		}
		if line, dup := firstLine[k.Value]; dup {
			c.fail(k, p, "duplicate key (first at line %d)", line)
			continue
		}
		firstLine[k.Value] = k.Line
		ft, ok := fields[k.Value]
		if !ok {
			c.fail(k, p, "unknown key (want one of %s)", strings.Join(names, ", "))
			continue
		}
		c.check(v, ft, p)
	}
}

// yamlFields maps the yaml keys of struct type t to field types, and lists
// the keys in declaration order for error messages.
func yamlFields(t reflect.Type) (map[string]reflect.Type, []string) {
	fields := make(map[string]reflect.Type, t.NumField())
	var names []string
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
		fields[name] = f.Type
		names = append(names, name)
	}
	return fields, names
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	return fmt.Sprintf("%q", n.Value)
}
