-- Retention scans records in id order instead of indexed time: ids grow
-- with insertion, and so, all but for replays, does indexed_us, so the
-- scan can stop at the first record still inside the window. The index
-- on indexed_us cost every record insert an index insert (6.9% of the
-- instructions of a post's ingest, BenchmarkApplyBatchViewersMix) for the
-- retention scan alone. sweep_state.retain_after_us is no longer used;
-- retain_after_id is the scan position, started over.
--
-- retain_full_due_us is the stream time at which the next lap starts from
-- the first record again, checking the records feeds held when the scan
-- passed them: kept here, so a daemon restarted often still runs it.
DROP INDEX records_by_indexed;
UPDATE sweep_state SET retain_after_us = 0, retain_after_id = 0;
ALTER TABLE sweep_state ADD COLUMN retain_full_due_us INTEGER NOT NULL DEFAULT 0;
