// Package lexicons holds the Lexicon documents of the appview's XRPC
// methods, written with the default namespace com.example.appview, and
// renders them for the namespace a daemon is configured with.
package lexicons

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// DefaultNamespace is the namespace the documents are written with.
const DefaultNamespace = "com.example.appview"

//go:embed com
var files embed.FS

// Render returns every document keyed by its NSID, with each reference to
// DefaultNamespace (ids and refs, which appear as JSON strings starting
// with it) moved to namespace. namespace must be a valid NSID prefix; the
// config validates it.
func Render(namespace string) (map[string][]byte, error) {
	out := make(map[string][]byte)
	err := fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path.Ext(p) != ".json" {
			return err
		}
		if dir := strings.ReplaceAll(DefaultNamespace, ".", "/"); path.Dir(p) != dir {
			return fmt.Errorf("lexicon %s: documents live in %s/", p, dir)
		}
		raw, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		doc := bytes.ReplaceAll(raw, []byte(`"`+DefaultNamespace+`.`), []byte(`"`+namespace+`.`))
		var head struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(doc, &head); err != nil {
			return fmt.Errorf("lexicon %s: %w", p, err)
		}
		// The file's place says its NSID: com/example/appview/getFeed.json.
		want := namespace + "." + strings.TrimSuffix(path.Base(p), ".json")
		if head.ID != want {
			return fmt.Errorf("lexicon %s: id %q, want %q", p, head.ID, want)
		}
		out[head.ID] = doc
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
