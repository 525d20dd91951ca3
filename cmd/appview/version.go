package main

import (
	"fmt"
	"io"

	"github.com/atfeeds/appview/appview"
)

// version prints what the binary is, one "key: value" line each, as set
// at build time (-ldflags -X …appview.Version=… -X …appview.Commit=…).
func version(args []string, stdout io.Writer) error {
	if len(args) == 1 && isHelp(args[0]) {
		_, err := fmt.Fprintln(stdout, "usage: appview version   print the version, commit and Go version")
		return err
	}
	if len(args) > 0 {
		return fmt.Errorf("version: unexpected argument %q", args[0])
	}
	_, err := fmt.Fprintf(stdout, "version: %s\ncommit: %s\ngo: %s\n",
		appview.Version, appview.BuildCommit(), appview.GoVersion())
	return err
}
