package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ScramCredential is one stored SCRAM credential (table scram_credentials).
type ScramCredential struct {
	User       string
	Mechanism  string
	Salt       []byte
	Iterations int32
	StoredKey  []byte
	ServerKey  []byte
}

// ScramKey names one credential.
type ScramKey struct {
	User, Mechanism string
}

// GetScramCredential returns one credential, keys included.
func (s *Store) GetScramCredential(ctx context.Context, user, mechanism string) (*ScramCredential, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	c := ScramCredential{User: user, Mechanism: mechanism}
	err := s.pool.QueryRow(ctx,
		"SELECT salt, iterations, stored_key, server_key FROM scram_credentials WHERE user_name = $1 AND mechanism = $2",
		user, mechanism).Scan(&c.Salt, &c.Iterations, &c.StoredKey, &c.ServerKey)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrCredentialNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get scram credential: %w", err)
	}
	return &c, nil
}

// ListScramCredentials returns the credentials of users (all users when empty), keys
// left empty, ordered by user and mechanism.
func (s *Store) ListScramCredentials(ctx context.Context, users []string) ([]ScramCredential, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	q := "SELECT user_name, mechanism, iterations FROM scram_credentials"
	var args []any
	if len(users) > 0 {
		q += " WHERE user_name = ANY($1)"
		args = append(args, users)
	}
	rows, err := s.pool.Query(ctx, q+" ORDER BY user_name, mechanism", args...)
	if err != nil {
		return nil, fmt.Errorf("list scram credentials: %w", err)
	}
	defer rows.Close()
	var out []ScramCredential
	for rows.Next() {
		var c ScramCredential
		if err := rows.Scan(&c.User, &c.Mechanism, &c.Iterations); err != nil {
			return nil, fmt.Errorf("list scram credentials: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list scram credentials: %w", err)
	}
	return out, nil
}

// AlterScramCredentials deletes and upserts credentials in one transaction and returns
// the deletions that found nothing.
func (s *Store) AlterScramCredentials(ctx context.Context, deletions []ScramKey, upsertions []ScramCredential) (missing []ScramKey, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		missing = missing[:0]
		for _, d := range deletions {
			tag, err := tx.Exec(ctx, "DELETE FROM scram_credentials WHERE user_name = $1 AND mechanism = $2", d.User, d.Mechanism)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				missing = append(missing, d)
			}
		}
		for _, u := range upsertions {
			if _, err := tx.Exec(ctx, `INSERT INTO scram_credentials (user_name, mechanism, salt, iterations, stored_key, server_key)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (user_name, mechanism) DO UPDATE SET salt = EXCLUDED.salt, iterations = EXCLUDED.iterations,
    stored_key = EXCLUDED.stored_key, server_key = EXCLUDED.server_key, updated_at = now()`,
				u.User, u.Mechanism, u.Salt, u.Iterations, u.StoredKey, u.ServerKey); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("alter scram credentials: %w", err)
	}
	return missing, nil
}
