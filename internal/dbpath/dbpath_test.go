package dbpath

import (
	"os"
	"path/filepath"
	"testing"
)

func TestResolve(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	real := filepath.Join(data, "appview.db")
	mustLink := func(target, link string) string {
		t.Helper()
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		return link
	}
	dangling := mustLink(real, filepath.Join(dir, "abs.db")) // the file is not made yet
	relative := mustLink("data/appview.db", filepath.Join(dir, "rel.db"))
	chain := mustLink("rel.db", filepath.Join(dir, "chain.db"))
	linkedDir := mustLink(data, filepath.Join(dir, "linkdir"))
	loop := mustLink("loop.db", filepath.Join(dir, "loop.db"))

	for _, tc := range []struct{ name, path, want string }{
		{"a plain path", real, real},
		{"a link to a file not made yet", dangling, real},
		{"a relative link", relative, real},
		{"a chain of links", chain, real},
		{"a linked directory", filepath.Join(linkedDir, "appview.db"), real},
		{"no file, no link", filepath.Join(dir, "new.db"), filepath.Join(dir, "new.db")},
	} {
		if got := Resolve(tc.path); got != tc.want {
			t.Errorf("%s: Resolve(%s) = %s, want %s", tc.name, tc.path, got, tc.want)
		}
	}
	if err := os.WriteFile(real, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := Resolve(dangling); got != real {
		t.Errorf("once the file exists: %s, want %s", got, real)
	}
	if got := Resolve(loop); got != loop { // ends, at the link itself
		t.Errorf("a loop: %s", got)
	}
}
