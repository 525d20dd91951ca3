package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
)

// onSignals returns a context that ends at the first of sigs, which starts
// the clean stop. A second signal ends the process at once through exit:
// whoever sends it has given up waiting, and nothing is lost that a
// restart does not replay (every batch commits with its cursor, so the
// cursor never covers a row that was not written). The returned stop
// releases the signals.
func onSignals(parent context.Context, stderr io.Writer, exit func(code int), sigs ...os.Signal) (context.Context, func()) {
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, sigs...)
	ctx, cancel := context.WithCancel(parent)
	done := make(chan struct{})
	go func() {
		select {
		case <-ch:
		case <-done:
			return
		}
		cancel()
		select {
		case s := <-ch:
			fmt.Fprintf(stderr, "appview: second %v before the clean stop finished: exiting now\n", s)
			exit(1)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel()
	}
}
