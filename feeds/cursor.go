package feeds

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// cursorKindJetstream names the live stream's row in cursors.
const cursorKindJetstream = "jetstream"

func (s *Store) loadCursor(ctx context.Context) (StreamCursor, error) {
	var c StreamCursor
	err := s.writer.QueryRowContext(ctx,
		`SELECT time_us, seq, host FROM cursors WHERE kind = ?`, cursorKindJetstream).
		Scan(&c.TimeUS, &c.Seq, &c.Host)
	if errors.Is(err, sql.ErrNoRows) {
		return StreamCursor{}, nil
	}
	if err != nil {
		return StreamCursor{}, fmt.Errorf("load stream cursor: %w", err)
	}
	return c, nil
}

// saveCursor writes the stream cursor inside the batch transaction. The
// WHERE clause keeps it from going backwards: a rewound replay after a
// reconnect carries older times and leaves the stored position alone.
func saveCursor(ctx context.Context, tx *sql.Tx, c StreamCursor) error {
	_, err := tx.ExecContext(ctx, `
		INSERT INTO cursors (kind, time_us, seq, host, updated_us)
		VALUES (?1, ?2, ?3, ?4, ?2)
		ON CONFLICT (kind) DO UPDATE SET
			time_us = excluded.time_us, seq = excluded.seq,
			host = excluded.host, updated_us = excluded.updated_us
		WHERE excluded.time_us >= cursors.time_us`,
		cursorKindJetstream, c.TimeUS, c.Seq, c.Host)
	if err != nil {
		return fmt.Errorf("save stream cursor: %w", err)
	}
	return nil
}

// Cursor returns the last committed stream cursor.
func (s *Store) Cursor() StreamCursor {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cursor
}

func (s *Store) advanceCursor(c StreamCursor) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.TimeUS >= s.cursor.TimeUS {
		s.cursor = c
	}
}
