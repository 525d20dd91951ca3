package appview

import "time"

// SweepConfig tunes the prune sweep that holds every feed to its cap and
// the retention of records no feed holds (docs/prune.md).
type SweepConfig struct {
	// Actors is how many viewers the sweep visits per ingest.batch_size
	// events, and what an idle tick's slice visits (sweep_actors).
	Actors int `yaml:"actors"`
	// IdleInterval is how often an idle stream still ticks the sweep.
	IdleInterval time.Duration `yaml:"idle_interval"`
	// RecoveryInterval is how long after a full pass the next one is due.
	RecoveryInterval time.Duration `yaml:"recovery_interval"`
	// Retention keeps target records no feed holds for this long, in event
	// time.
	Retention time.Duration `yaml:"retention"`
	// TombstoneWindow keeps delete tombstones this long, in event time: it
	// must cover any replay of the stream.
	TombstoneWindow time.Duration `yaml:"tombstone_window"`
}

// maxSweepActors bounds sweep.actors: 100 times the default.
const maxSweepActors = 50000

func defaultSweepConfig() SweepConfig {
	return SweepConfig{
		Actors: 500, IdleInterval: 5 * time.Second, RecoveryInterval: 6 * time.Hour,
		Retention: 7 * 24 * time.Hour, TombstoneWindow: 72 * time.Hour,
	}
}

func (c Config) validateSweep(fail func(field, format string, args ...any)) {
	// A slice visits up to this many viewers in one transaction (times a
	// catch-up batch's share of the pace, up to 100): bounded so a slice's
	// work is, and the product cannot overflow.
	if c.Sweep.Actors <= 0 || c.Sweep.Actors > maxSweepActors {
		fail("sweep.actors", "must be between 1 and %d", maxSweepActors)
	}
	for field, d := range map[string]time.Duration{
		"sweep.idle_interval":     c.Sweep.IdleInterval,
		"sweep.recovery_interval": c.Sweep.RecoveryInterval,
		"sweep.retention":         c.Sweep.Retention,
		"sweep.tombstone_window":  c.Sweep.TombstoneWindow,
	} {
		if d <= 0 {
			fail(field, "must be positive")
		}
	}
	// Both windows must cover the longest replay, a failover's: a replayed
	// create whose tombstone, or whose record retention retired (no feed
	// holding it), had already gone would be stored again and fanned out,
	// so the replay of a duplicate would change the store (docs/cursors.md).
	rewind := c.Jetstream.FailoverRewind()
	if c.Sweep.TombstoneWindow > 0 && c.Sweep.TombstoneWindow < rewind {
		fail("sweep.tombstone_window", "must cover a failover's rewind (%s: jetstream.rewind, at least 5m)", rewind)
	}
	if c.Sweep.Retention > 0 && c.Sweep.Retention < rewind {
		fail("sweep.retention", "must cover a failover's rewind (%s: jetstream.rewind, at least 5m)", rewind)
	}
}
