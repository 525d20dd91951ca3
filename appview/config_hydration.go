package appview

import (
	"fmt"
	"time"

	"github.com/atfeeds/appview/feeds"
)

// HydrationConfig turns on profile hydration: getFeed's profiles=true
// returns the profiles of a page's authors. Off, profile records are not
// subscribed to and profiles=true answers an empty list.
type HydrationConfig struct {
	// Profiles subscribes to app.bsky.actor.profile and stores the
	// profiles of in-scope accounts; missing ones are fetched from the
	// author's PDS when a read asks for them.
	Profiles bool `yaml:"profiles"`
	// FetchWait bounds how long one getFeed waits, in all, for profiles it
	// had to fetch; the fetch goes on in the background after it.
	FetchWait time.Duration `yaml:"fetch_wait"`
	// FetchTimeout bounds one account's identity resolution and profile
	// fetch.
	FetchTimeout time.Duration `yaml:"fetch_timeout"`
	// QueueSize bounds the accounts waiting to be fetched; past it a fetch
	// is dropped (and asked for again by a later read).
	QueueSize int `yaml:"queue_size"`
	// Concurrency accounts are fetched at once, at most PerHost of them
	// from one PDS host; a request running over 1 s is stood in for, up
	// to Concurrency of them (profiles.Config).
	Concurrency int `yaml:"concurrency"`
	PerHost     int `yaml:"per_host"`
	// RetryAfter: an account whose fetch failed is not fetched again
	// before this has passed.
	RetryAfter time.Duration `yaml:"retry_after"`
}

// maxFetchWait keeps the read-path wait short: it is added to a getFeed
// whose authors' profiles are missing.
const maxFetchWait = 2 * time.Second

// maxHydrationConcurrency bounds hydration.concurrency and per_host.
const maxHydrationConcurrency = 1024

func defaultHydrationConfig() HydrationConfig {
	return HydrationConfig{
		Profiles:     false,
		FetchWait:    250 * time.Millisecond,
		FetchTimeout: 10 * time.Second,
		QueueSize:    1024,
		Concurrency:  4,
		PerHost:      2,
		RetryAfter:   5 * time.Minute,
	}
}

func (c Config) validateHydration(fail func(field, format string, args ...any)) {
	h := c.Hydration
	if h.FetchWait <= 0 || h.FetchWait > maxFetchWait {
		fail("hydration.fetch_wait", "must be positive and at most %s", maxFetchWait)
	}
	for field, d := range map[string]time.Duration{
		"hydration.fetch_timeout": h.FetchTimeout,
		"hydration.retry_after":   h.RetryAfter,
	} {
		if d <= 0 {
			fail(field, "must be positive")
		}
	}
	if h.QueueSize < 1 || h.QueueSize > 1_000_000 {
		fail("hydration.queue_size", "must be between 1 and 1000000")
	}
	// The fetcher starts a goroutine per unit of concurrency: a typo of a
	// few extra digits started millions and the daemon ran out of memory.
	if h.Concurrency < 1 || h.Concurrency > maxHydrationConcurrency {
		fail("hydration.concurrency", "must be between 1 and %d", maxHydrationConcurrency)
	}
	if h.PerHost < 1 || h.PerHost > maxHydrationConcurrency {
		fail("hydration.per_host", "must be between 1 and %d", maxHydrationConcurrency)
	}
	if !h.Profiles {
		return
	}
	profile := string(feeds.ProfileCollection)
	for i, f := range c.Feeds {
		if f.FollowCollection == profile {
			fail(fmt.Sprintf("feeds[%d].follow_collection", i), "must not be %s while hydration.profiles is on", profile)
		}
		for j, t := range f.Targets {
			if t.Collection == profile {
				fail(fmt.Sprintf("feeds[%d].targets[%d].collection", i, j), "must not be %s while hydration.profiles is on", profile)
			}
		}
	}
}
