-- Profiles (app.bsky.actor.profile, rkey self) of in-scope accounts, kept
-- when profile hydration is on, for getFeed's profiles=true. Only the
-- bounded fields a client shows are stored, never the whole record.
CREATE TABLE profiles (
    actor_id     INTEGER PRIMARY KEY,
    -- The rev of the commit that wrote or deleted the profile, so replays
    -- change nothing; '' when it was fetched from the PDS (getRecord has no
    -- rev), so any change from the stream supersedes it.
    rev          TEXT    NOT NULL,
    -- 0: the account has no profile record (deleted on the stream, or its
    -- PDS said so). Kept so a read does not fetch it again and a replayed
    -- older create cannot bring it back.
    present      INTEGER NOT NULL,
    cid          TEXT    NOT NULL DEFAULT '',
    display_name TEXT    NOT NULL DEFAULT '',
    description  TEXT    NOT NULL DEFAULT '',
    avatar_cid   TEXT    NOT NULL DEFAULT '',
    avatar_mime  TEXT    NOT NULL DEFAULT '',
    avatar_size  INTEGER NOT NULL DEFAULT 0,
    updated_us   INTEGER NOT NULL
);

-- actors.handle (from 0001, unused until now) holds the handle verified in
-- both directions when a profile was fetched: NULL means not known (never
-- resolved, or an identity event since), '' that the account has no
-- verified handle.
