-- The stream time at which the retention scan's next lap starts from the
-- first record again, checking the records feeds held when the scan passed
-- them. Kept with the scan position, so a daemon restarted more often than
-- a full lap comes round still runs it.
ALTER TABLE sweep_state ADD COLUMN retain_full_due_us INTEGER NOT NULL DEFAULT 0;
