package feeds

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// Profile is what the store holds about an account for hydration.
type Profile struct {
	DID syntax.DID
	// HandleKnown: the handle was verified since the last identity change;
	// Handle is then the verified handle, or "" when there is none.
	HandleKnown bool
	Handle      syntax.Handle
	// HandleCheckedAt is when the handle was last verified; zero when
	// unknown (checked before the time was kept).
	HandleCheckedAt time.Time
	// Known: the store knows whether the account has a profile record;
	// Present says whether it does, with its CID and fields.
	Known   bool
	Present bool
	CID     string
	Fields  ProfileFields
}

// Complete reports whether nothing about the account is left to fetch.
func (p Profile) Complete() bool { return p.Known && p.HandleKnown }

// readProfilesSQL reads the accounts named in a JSON array, one index
// lookup each on actors.did, with their profile by primary key.
const readProfilesSQL = `
	SELECT a.did, a.handle, a.handle_checked_us, p.present, p.cid, p.display_name, p.description,
		p.avatar_cid, p.avatar_mime, p.avatar_size
	FROM actors a LEFT JOIN profiles p ON p.actor_id = a.id
	WHERE a.did IN (SELECT value FROM json_each(?1))`

// Profiles returns what is stored about each of dids, in the same order;
// an account the store does not know comes back with only its DID.
func (s *Store) Profiles(ctx context.Context, dids []syntax.DID) ([]Profile, error) {
	out := make([]Profile, len(dids))
	at := make(map[syntax.DID]int, len(dids))
	for i, d := range dids {
		out[i].DID = d
		at[d] = i
	}
	if len(dids) == 0 {
		return out, nil
	}
	list, err := json.Marshal(dids)
	if err != nil {
		return nil, err
	}
	rows, err := s.reader.QueryContext(ctx, readProfilesSQL, string(list))
	if err != nil {
		return nil, fmt.Errorf("read profiles: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			did                     string
			handle, cid, name, desc sql.NullString
			avatarCID, avatarMime   sql.NullString
			present, avatarSize     sql.NullInt64
			checkedUS               int64
		)
		if err := rows.Scan(&did, &handle, &checkedUS, &present, &cid, &name, &desc, &avatarCID, &avatarMime, &avatarSize); err != nil {
			return nil, fmt.Errorf("read profile row: %w", err)
		}
		i, ok := at[syntax.DID(did)]
		if !ok {
			continue
		}
		p := &out[i]
		p.HandleKnown, p.Handle = handle.Valid, syntax.Handle(handle.String)
		if handle.Valid && checkedUS > 0 {
			p.HandleCheckedAt = time.UnixMicro(checkedUS)
		}
		if !present.Valid {
			continue // no profile row
		}
		p.Known, p.Present, p.CID = true, present.Int64 == 1, cid.String
		p.Fields = ProfileFields{DisplayName: name.String, Description: desc.String}
		if avatarCID.String != "" {
			p.Fields.Avatar = &Blob{CID: avatarCID.String, MimeType: avatarMime.String, Size: avatarSize.Int64}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read profiles: %w", err)
	}
	return out, nil
}
