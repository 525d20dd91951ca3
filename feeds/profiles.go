package feeds

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// Profile hydration (Options.Profiles) keeps, for every in-scope account
// (one whose target records are stored), the bounded fields of its profile
// record and its verified handle, so getFeed can show who wrote what
// without asking anyone. Profiles come from the stream like any record,
// and from the author's PDS when a read finds one missing (package
// profiles). A stream change always wins over a fetched copy: the fetched
// copy has no rev and is only written where nothing is stored.

const insertProfileSQL = `
	INSERT INTO profiles (actor_id, rev, present, cid, display_name, description,
		avatar_cid, avatar_mime, avatar_size, updated_us)
	VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)`

// upsertProfileSQL writes a stream change; insertFetchedProfileSQL writes
// a fetched copy only where nothing is stored.
const (
	upsertProfileSQL = insertProfileSQL + `
	ON CONFLICT (actor_id) DO UPDATE SET rev = excluded.rev, present = excluded.present,
		cid = excluded.cid, display_name = excluded.display_name, description = excluded.description,
		avatar_cid = excluded.avatar_cid, avatar_mime = excluded.avatar_mime,
		avatar_size = excluded.avatar_size, updated_us = excluded.updated_us`
	insertFetchedProfileSQL = insertProfileSQL + ` ON CONFLICT (actor_id) DO NOTHING`
)

// applyProfile stores a profile change of an in-scope account; a change
// whose rev is not newer than the stored one is a replay.
func (w *txWriter) applyProfile(c *Change) error {
	if c.RKey != ProfileRKey {
		w.res.Ignored++ // not the profile: only "self" is
		return nil
	}
	id, inScope, err := w.profileInScope(c.DID)
	if err != nil || !inScope {
		return err
	}
	// A deleted account keeps no profile: a change that reaches it now is
	// from before the deletion (a reconnect's replay), as a reactivation
	// would have cleared the mark first.
	if deleted, _, err := w.accountDeleted(id); err != nil || deleted {
		if deleted {
			w.res.Duplicates++
		}
		return err
	}
	var stored string
	err = w.tx.QueryRowContext(w.ctx, `SELECT rev FROM profiles WHERE actor_id = ?`, id).Scan(&stored)
	switch {
	case err == nil && c.Rev <= stored:
		w.res.Duplicates++
		return nil
	case err != nil && !errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("look up profile: %w", err)
	}
	var fields ProfileFields
	present := c.Op != OpDelete
	if present {
		// The decoder checked $type against the collection; a record that
		// still does not parse is stored as an empty profile.
		fields, _ = ParseProfile(c.Record)
	}
	if err := w.writeProfile(upsertProfileSQL, id, c.Rev, present, c.CID, fields, c.TimeUS); err != nil {
		return err
	}
	w.res.Applied++
	return nil
}

// profileInScope returns the account's id when its profile is kept: it is
// interned already (the stream never interns an account for its profile)
// and, outside index_all mode, someone whose follows are stored follows it.
func (w *txWriter) profileInScope(did syntax.DID) (int64, bool, error) {
	if !w.s.indexAll {
		return w.authorInScope(did) // which interns nothing outside index_all
	}
	id, found, err := w.existingActorID(did)
	w.countOutOfScope(found, err)
	return id, found, err
}

// writeProfile runs query (upsertProfileSQL or insertFetchedProfileSQL)
// with the profile's columns; an absent profile keeps no fields.
func (w *txWriter) writeProfile(query string, id int64, rev string, present bool, cid string, f ProfileFields, atUS int64) error {
	var b Blob
	if f.Avatar != nil && present {
		b = *f.Avatar
	}
	if !present {
		cid, f = "", ProfileFields{}
	}
	if _, err := w.tx.ExecContext(w.ctx, query, id, rev, present, cid,
		f.DisplayName, f.Description, b.CID, b.MimeType, b.Size, atUS); err != nil {
		return fmt.Errorf("write profile: %w", err)
	}
	// Counted as written: a batch tried again counts its drops again.
	w.s.metrics.profileFieldsDropped(f.Dropped)
	return nil
}

// forgetHandles drops the stored handle of accounts whose identity may have
// changed, so the next read verifies it again. The handle an identity event
// carries is not taken as is: the relay's word is not a verification.
func (w *txWriter) forgetHandles(dids []syntax.DID) error {
	if !w.s.profiles {
		return nil
	}
	for _, did := range dids {
		if _, err := w.tx.ExecContext(w.ctx,
			`UPDATE actors SET handle = NULL WHERE did = ? AND handle IS NOT NULL`, string(did)); err != nil {
			return fmt.Errorf("forget handle: %w", err)
		}
	}
	w.identities = append(w.identities, dids...)
	return nil
}

// forgetAllProfiles drops every stored handle and profile: after a gap in
// the stream the identity events and profile changes in it are lost, so
// each is fetched again at its next read.
func (w *txWriter) forgetAllProfiles() error {
	if !w.s.profiles {
		return nil
	}
	for _, q := range []string{
		`UPDATE actors SET handle = NULL WHERE handle IS NOT NULL`,
		`DELETE FROM profiles`,
	} {
		if _, err := w.tx.ExecContext(w.ctx, q); err != nil {
			return fmt.Errorf("forget profiles: %w", err)
		}
	}
	return nil
}

// dropProfile forgets an account's profile: it left the scope (nobody
// follows it any more), and a copy kept now would be stale when it comes
// back. The drop counts in the identity log, so a fetch begun before it
// does not store its copy, whatever the scope when it ends.
func (w *txWriter) dropProfile(actorID int64) error {
	if _, err := w.tx.ExecContext(w.ctx, `DELETE FROM profiles WHERE actor_id = ?`, actorID); err != nil {
		return fmt.Errorf("drop profile: %w", err)
	}
	if !w.s.profiles {
		return nil // no fetch runs to order the drop against
	}
	var did string
	if err := w.tx.QueryRowContext(w.ctx, `SELECT did FROM actors WHERE id = ?`, actorID).Scan(&did); err != nil {
		return fmt.Errorf("drop profile: %w", err)
	}
	w.identities = append(w.identities, syntax.DID(did))
	return nil
}

// FetchedProfile is what the profile fetcher learned about an account.
type FetchedProfile struct {
	DID syntax.DID
	// HandleResolved: Handle is the handle verified in both directions, ""
	// when the account has none that verifies.
	HandleResolved bool
	Handle         syntax.Handle
	// RecordFetched: the PDS answered for the profile record, Present with
	// CID and Fields, or not Present when it has none.
	RecordFetched bool
	Present       bool
	CID           string
	Fields        ProfileFields
	// At is when it was fetched.
	At time.Time
	// IdentitySeq is Store.IdentitySeq taken before the handle was
	// resolved: an identity event of the account committed since then
	// keeps the handle from being stored (identities.go).
	IdentitySeq uint64
}

// StoreFetchedProfile writes what a fetch learned about an account the
// store knows; an unknown account is left alone. The record is written
// only where no profile is stored, so it never overrides a change the
// stream delivered meanwhile, and only while the account's profile is in
// scope.
func (s *Store) StoreFetchedProfile(ctx context.Context, p FetchedProfile) error {
	return s.write(ctx, func(w *txWriter) error {
		id, found, err := w.existingActorID(p.DID)
		if err != nil || !found {
			return err
		}
		// A deleted account keeps no profile nor handle (deleteAccount),
		// whenever the fetch began: one begun after the deletion saw no
		// identity event since its start
		// (TestAFetchBegunAfterAnAccountDeletionIsNotStored).
		if deleted, _, err := w.accountDeleted(id); err != nil || deleted {
			return err
		}
		// An identity event of the account, or its profile dropped, since
		// the fetch began: what the fetch found may be stale.
		raced := s.identities.changedSince(p.DID, p.IdentitySeq)
		if p.HandleResolved && !raced {
			if _, err := w.tx.ExecContext(ctx, `UPDATE actors SET handle = ?, handle_checked_us = ? WHERE id = ?`,
				string(p.Handle), p.At.UnixMicro(), id); err != nil {
				return fmt.Errorf("store handle: %w", err)
			}
		}
		if !p.RecordFetched || raced {
			return nil
		}
		// An account that left scope while the fetch ran had its profile
		// dropped on purpose, and the stream's changes to it are ignored
		// until it is back: a copy stored now would be served stale then,
		// never fetched again; so would one stored after it came back
		// (raced above). TestAFetchedProfileOfAnAccountOutOfScopeIsNotStored.
		if _, inScope, err := w.profileInScope(p.DID); err != nil || !inScope {
			return err
		}
		return w.writeProfile(insertFetchedProfileSQL, id, "", p.Present, p.CID, p.Fields, p.At.UnixMicro())
	})
}
