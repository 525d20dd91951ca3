package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/atfeeds/appview/appview"
)

// printConfig prints the configuration serve would run with: defaults,
// then the file, then APPVIEW_ variables, validated, secrets redacted.
// The output is itself a valid config file, except that a redacted secret
// (notify.secret) must be put back before it is used as one.
func printConfig(args, environ []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML config file (default: built-in defaults)")
	listEnv := fs.Bool("env", false, "list the environment variables that set config keys, and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("config: unexpected argument %q", fs.Arg(0))
	}
	if *listEnv {
		for _, name := range appview.EnvNames() {
			fmt.Fprintln(stdout, name)
		}
		return nil
	}
	cfg, err := appview.LoadConfigEnv(*configPath, environ)
	if err != nil {
		return err
	}
	out, err := cfg.MarshalRedactedYAML()
	if err != nil {
		return err
	}
	_, err = stdout.Write(out)
	return err
}
