-- The time_us of the account event that last deleted an actor: the
-- deleted_us of the tombstones that deletion wrote over its records and
-- follows (feeds/accounts.go, buryAccount). A reactivation clears those
-- tombstones, since the restored repository holds the records again;
-- kept, they blocked a listing fetched within minutes of the deletion
-- (a listing speaks as of 5 minutes before its fetch), and the restored
-- account's posts and follows never came back. 0: no deletion recorded
-- (every row stored before this step).
ALTER TABLE actors ADD COLUMN deleted_us INTEGER NOT NULL DEFAULT 0;
