-- The relay's sequence number of the last account event applied to an
-- actor, 0 when it had none. status_us now holds the relay's time of that
-- event when it carried one (feeds/accounts.go), which a relay stamps to
-- the millisecond: two changes in one millisecond are ordered by this.
ALTER TABLE actors ADD COLUMN status_seq INTEGER NOT NULL DEFAULT 0;
