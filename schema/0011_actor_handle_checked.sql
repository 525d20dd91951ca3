-- When actors.handle was last verified (unix µs; 0: never, or before this
-- column). A handle stops verifying without an identity event when its DNS
-- record or well-known file changes, and identity events are missed in a
-- stream gap, so a stored handle is checked again once it is old.
ALTER TABLE actors ADD COLUMN handle_checked_us INTEGER NOT NULL DEFAULT 0;
