package appview

import (
	"bytes"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Redacted stands in for the value of every non-empty field tagged
// `secret:"true"` wherever the config is shown: printed by `appview
// config`, logged by serve at start (Config is a slog.LogValuer), and for
// the user information of any URL in it (redactUserinfo). Tag every
// bearer token, password and key that joins Config; the printed YAML still
// parses, with the placeholder in place of the secret.
const Redacted = "REDACTED"

// MarshalRedactedYAML renders the config as a YAML document in the config
// file's own syntax (durations with units, key names as in the file), with
// secrets redacted. It is what `appview config` prints.
func (c Config) MarshalRedactedYAML() ([]byte, error) {
	n, err := redactedNode(reflect.ValueOf(c), false)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		return nil, fmt.Errorf("encode config: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode config: %w", err)
	}
	return buf.Bytes(), nil
}

// LogValue logs the config as nested groups with secrets redacted, so
// that logging a Config can never leak one. Lists of values are joined
// with commas; list items that are mappings are grouped by index.
func (c Config) LogValue() slog.Value {
	n, err := redactedNode(reflect.ValueOf(c), false)
	if err != nil {
		return slog.StringValue("unprintable config: " + err.Error())
	}
	return nodeLogValue(n)
}

// redactedNode builds the YAML node of v, walking structs by their yaml
// tags. secret marks a value whose field carries the secret tag.
func redactedNode(v reflect.Value, secret bool) (*yaml.Node, error) {
	if secret && !v.IsZero() && v.Kind() != reflect.Slice {
		// A secret list keeps its shape, each item redacted, so the
		// printed document still parses.
		return scalarNode(Redacted)
	}
	if v.Type() == durationType {
		return scalarNode(fmt.Sprint(v.Interface()))
	}
	switch v.Kind() {
	case reflect.Struct:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" || (opts == "omitempty" && v.Field(i).IsZero()) {
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			isSecret, _ := strconv.ParseBool(f.Tag.Get("secret"))
			val, err := redactedNode(v.Field(i), isSecret)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			key, _ := scalarNode(name)
			n.Content = append(n.Content, key, val)
		}
		return n, nil
	case reflect.Slice:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for i := range v.Len() {
			e, err := redactedNode(v.Index(i), secret)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, e)
		}
		return n, nil
	case reflect.String:
		return scalarNode(redactUserinfo(v.String()))
	case reflect.Bool,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		n := new(yaml.Node)
		if err := n.Encode(v.Interface()); err != nil {
			return nil, err
		}
		return n, nil
	}
	return nil, fmt.Errorf("cannot print a %s", v.Type())
}

// redactUserinfo replaces the user information of a URL (a password, or
// a token given as the user name) with Redacted; any other string is
// returned as it is. It reads the authority by hand rather than with
// url.Parse, so a URL that does not parse (a bad escape in the password)
// is redacted too.
func redactUserinfo(s string) string {
	scheme := strings.Index(s, "://")
	if scheme < 0 {
		return s
	}
	rest := s[scheme+len("://"):]
	authority := rest
	if end := strings.IndexAny(rest, "/?#"); end >= 0 {
		authority = rest[:end]
	}
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return s
	}
	return s[:scheme+len("://")] + Redacted + rest[at:]
}

func scalarNode(s string) (*yaml.Node, error) {
	n := new(yaml.Node)
	return n, n.Encode(s)
}

func nodeLogValue(n *yaml.Node) slog.Value {
	switch n.Kind {
	case yaml.MappingNode:
		attrs := make([]slog.Attr, 0, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			attrs = append(attrs, slog.Attr{Key: n.Content[i].Value, Value: nodeLogValue(n.Content[i+1])})
		}
		return slog.GroupValue(attrs...)
	case yaml.SequenceNode:
		scalars := make([]string, 0, len(n.Content))
		for _, e := range n.Content {
			if e.Kind != yaml.ScalarNode {
				scalars = nil
				break
			}
			scalars = append(scalars, e.Value)
		}
		if scalars != nil || len(n.Content) == 0 {
			return slog.StringValue(strings.Join(scalars, ","))
		}
		attrs := make([]slog.Attr, 0, len(n.Content))
		for i, e := range n.Content {
			attrs = append(attrs, slog.Attr{Key: strconv.Itoa(i), Value: nodeLogValue(e)})
		}
		return slog.GroupValue(attrs...)
	}
	return slog.StringValue(n.Value)
}
