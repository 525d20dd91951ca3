-- Retention scans records in id order instead of indexed time: ids grow
-- with insertion, and so, all but for replays, does indexed_us, so the
-- scan can stop at the first record still inside the window. The index
-- on indexed_us cost every record insert an index insert (7.6% of the
-- instructions of a post's ingest, BenchmarkApplyBatchViewersMix) for the
-- retention scan alone. sweep_state.retain_after_us is no longer used;
-- retain_after_id is the scan position, started over.
DROP INDEX records_by_indexed;
UPDATE sweep_state SET retain_after_us = 0, retain_after_id = 0;
