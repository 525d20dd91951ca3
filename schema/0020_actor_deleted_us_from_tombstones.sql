-- Accounts deleted before 0019 kept deleted_us = 0, so their reactivation
-- cleared none of the deletion's tombstones (feeds/accounts.go,
-- rebuildRestored), and a listing fetched within minutes of the deletion
-- still found nothing to store. The deletion's tombstones carry its
-- time_us as their deleted_us and end in ".-unlisted" (buryAccount); the
-- newest such tombstone of a deleted account is that deletion's, since a
-- deleted account is listed no more. An account whose tombstones the
-- retention sweep already removed keeps 0: there is nothing to clear.
UPDATE actors SET deleted_us = coalesce((
    SELECT max(t.deleted_us) FROM tombstones t
    WHERE t.actor_id = actors.id AND t.rev LIKE '%.-unlisted'), 0)
WHERE deleted = 1 AND deleted_us = 0;
