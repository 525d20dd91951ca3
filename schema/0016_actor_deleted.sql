-- 1 once an account event deleted the account, until one reactivates it.
-- A deletion removes the account's records, follows and listings, and a
-- listing of it that was running then must not write them back: its
-- page transactions read this (feeds/listings.go). An inactive account
-- (deactivated, taken down) keeps its rows, so active alone cannot say.
ALTER TABLE actors ADD COLUMN deleted INTEGER NOT NULL DEFAULT 0;
-- Accounts deleted before this migration keep 0: nothing stored tells them
-- from deactivated ones, and their listings were removed then.
