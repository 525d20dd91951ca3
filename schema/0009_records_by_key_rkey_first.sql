-- records_by_key leads with the rkey. A record key is almost always a TID,
-- which spells the time it was made and sorts in that order, so the keys
-- of new records fall at the end of this index instead of each on a random
-- page of it: a batch dirties a few pages at its end rather than a page per
-- post, however large the table grows. Lookups name the whole key, so the
-- order of its columns does not matter to them; scans of an author's
-- records use records_by_author.
DROP INDEX records_by_key;
CREATE UNIQUE INDEX records_by_key ON records (rkey, actor_id, collection_id);
