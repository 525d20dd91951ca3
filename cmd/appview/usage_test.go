package main

import (
	"regexp"
	"strings"
	"testing"
)

// Every flag a command's flag set takes is named in `appview help`, on
// the command's own lines or in the notes after the list, so an operator
// reading the usage learns every flag -h would show.
func TestUsageNamesEveryFlag(t *testing.T) {
	help, _, err := runCmd(t, nil, "help")
	if err != nil {
		t.Fatal(err)
	}
	list, notes, ok := strings.Cut(help, "\n\n")
	if !ok {
		t.Fatalf("help has no notes after the command list:\n%s", help)
	}
	flagLine := regexp.MustCompile(`(?m)^  -([a-z-]+)`)
	for _, cmd := range [][]string{
		{"serve"}, {"config"}, {"health"}, {"audit"}, {"backfill"}, {"rebuild"}, {"migrate"},
		{"cursor", "show"}, {"cursor", "reset", "jetstream"},
		{"cursor", "reset", "account", "did:plc:x"}, {"cursor", "reset", "viewer", "did:plc:x"},
	} {
		name := "appview " + strings.Join(cmd, " ")
		if strings.HasPrefix(name, "appview cursor reset ") && strings.Count(name, " ") == 4 {
			name = name[:strings.LastIndex(name, " ")] // the DID
		}
		own := commandLines(list, name)
		if own == "" {
			t.Errorf("help lists no %q", name)
			continue
		}
		_, flags, _ := runCmd(t, nil, append(cmd, "-h")...)
		names := flagLine.FindAllStringSubmatch(flags, -1)
		if len(names) == 0 {
			t.Errorf("%s -h: no flags in\n%s", name, flags)
		}
		for _, m := range names {
			if !strings.Contains(own, "--"+m[1]) && !strings.Contains(notes, "--"+m[1]) {
				t.Errorf("help does not name %s's flag --%s", name, m[1])
			}
		}
	}
}

// commandLines returns the usage lines of the command spelled name: its
// line and the indented description lines under it.
func commandLines(list, name string) string {
	var out []string
	in := false
	for _, l := range strings.Split(list, "\n") {
		if strings.HasPrefix(l, "  appview ") {
			in = strings.HasPrefix(l, "  "+name+" ") || l == "  "+name
		}
		if in {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
