-- How many times an account event deleted the account. The deleted mark
-- (0016) is gone once the account is reactivated, so a listing that was
-- running across a deletion and a reactivation could not tell; it compares
-- this count with the one it read when it started (feeds/listings.go).
ALTER TABLE actors ADD COLUMN deletions INTEGER NOT NULL DEFAULT 0;
