-- The relay's sequence number of the last account event applied to an
-- actor. status_us now holds the relay's time of that event when it
-- carried one (feeds/accounts.go), which a relay stamps to the
-- millisecond: two changes in one millisecond are ordered by this. -1
-- says that status_us holds the event's time_us instead, as every row
-- stored before this step does: the next event is then compared by its
-- own time_us, since a time_us runs later than the relay's time by the
-- host's lag, and a change that followed within it would look older.
ALTER TABLE actors ADD COLUMN status_seq INTEGER NOT NULL DEFAULT 0;
UPDATE actors SET status_seq = -1 WHERE status_us > 0;
