package appview

import (
	"fmt"
	"regexp"
	"slices"

	"github.com/atfeeds/appview/feeds"
)

// FieldConfig declares a queryable field of a target collection: getFeed
// then accepts Name as a filter on that collection (name=value for an
// equality field, nameMin= and nameMax= for a range field).
type FieldConfig struct {
	// Name is the request parameter.
	Name string `yaml:"name"`
	// Path is the dotted JSON path of the value in the record, such as
	// langs or reply.root.uri; arrays along it match on any element.
	Path string `yaml:"path"`
	// Kind is equality or range.
	Kind string `yaml:"kind"`
	// Type is what a range compares: datetime or integer. Equality fields
	// leave it out.
	Type string `yaml:"type"`
}

// maxFieldsPerTarget bounds the field values one stored record writes.
const maxFieldsPerTarget = 8

var fieldNameRegex = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_]{0,31}$`)

// reservedParams are getFeed's own parameters (and those a client library
// may send to any feed); a field's parameters must not shadow them.
var reservedParams = []string{"feed", "actor", "collection", "limit", "cursor", "profiles"}

// StoreKind maps the kind and type to the store's field kind.
func (f FieldConfig) StoreKind() feeds.FieldKind {
	if f.Kind == "range" {
		return feeds.FieldKind(f.Type)
	}
	return feeds.FieldEquality
}

// Params lists the request parameters the field adds to getFeed.
func (f FieldConfig) Params() []string {
	kind := feeds.FieldEquality
	if f.Kind == "range" {
		kind = feeds.FieldDatetime // either range type makes the same parameters
	}
	return feeds.Field{Name: f.Name, Kind: kind}.Params()
}

// validateFields checks one target's fields; tp is the target's path.
func validateFields(fail func(field, format string, args ...any), tp string, fields []FieldConfig) {
	if len(fields) > maxFieldsPerTarget {
		fail(tp+".fields", "at most %d fields per target", maxFieldsPerTarget)
	}
	params := map[string]int{}
	for i, f := range fields {
		fp := fmt.Sprintf("%s.fields[%d]", tp, i)
		nameOK := fieldNameRegex.MatchString(f.Name)
		if !nameOK {
			fail(fp+".name", "%q: must be 1 to 32 letters, digits or '_', starting with a letter", f.Name)
		}
		if err := feeds.CheckFieldPath(f.Path); err != nil {
			fail(fp+".path", "%v", err)
		}
		switch f.Kind {
		case "equality":
			if f.Type != "" {
				fail(fp+".type", "only range fields have a type")
			}
		case "range":
			if f.Type != "datetime" && f.Type != "integer" {
				fail(fp+".type", "%q: a range field's type must be datetime or integer", f.Type)
			}
		default:
			fail(fp+".kind", "%q: must be equality or range", f.Kind)
		}
		if !nameOK {
			continue
		}
		for _, p := range f.Params() {
			if slices.Contains(reservedParams, p) {
				fail(fp+".name", "%q: parameter %s is one of getFeed's own", f.Name, p)
			} else if j, dup := params[p]; dup {
				fail(fp+".name", "%q: parameter %s is also made by fields[%d]", f.Name, p, j)
			} else {
				params[p] = i
			}
		}
	}
}
