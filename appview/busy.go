package appview

import (
	"errors"
	"log/slog"

	"github.com/atfeeds/appview/feeds"
)

// retryWhileBusy runs write again while it fails with feeds.ErrWriteBusy:
// another process (an operator command) holds the write lock, nothing of
// the write was done, and each try waits the busy timeout (5 s). Once
// stopping is closed it gives up after triesAfterStop more failures.
func retryWhileBusy(stopping <-chan struct{}, triesAfterStop int, log *slog.Logger, what string, write func() error) error {
	afterStop := 0
	for attempt := 1; ; attempt++ {
		err := write()
		if !errors.Is(err, feeds.ErrWriteBusy) {
			return err
		}
		select {
		case <-stopping:
			if afterStop++; afterStop >= triesAfterStop {
				return err
			}
		default:
		}
		log.Warn(what+" waits: another process holds the database's write lock", "attempt", attempt)
	}
}
