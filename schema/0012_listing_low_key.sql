-- The lowest record key of the last page a listing round applied ('' when
-- not known: a round's start, or a page out of order or with records it
-- dropped). A run that resumes the round takes it as the upper end of the
-- key span its first page vouches for, so a resumed round still finds the
-- records deleted upstream between its pages (feeds/listing_reconcile.go).
ALTER TABLE listings ADD COLUMN low_rkey TEXT NOT NULL DEFAULT '';
