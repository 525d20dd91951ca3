-- Jetstream sessions are sync runs too (kind 'jetstream', subject = the
-- host): where each one started and ended in the stream.
ALTER TABLE sync_runs ADD COLUMN start_cursor INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sync_runs ADD COLUMN end_cursor INTEGER NOT NULL DEFAULT 0;
