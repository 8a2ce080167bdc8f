package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// MqttUser is one mqtt-bridge listener login (table mqtt_users). Publish and
// Subscribe nil: every topic; empty and not nil: none.
type MqttUser struct {
	Username           string
	PasswordHash       string
	Publish, Subscribe []string
	UpdatedAt          time.Time
}

// rules keeps nil (every topic) apart from empty (none) on the way to Postgres.
func rules(f []string) any {
	if f == nil {
		return nil
	}
	return append([]string{}, f...)
}

// PutMqttUser creates or replaces u; an empty PasswordHash keeps the stored one (the
// user must exist then: ErrMqttUserNotFound). It returns whether the user is new and
// the row as stored.
func (s *Store) PutMqttUser(ctx context.Context, u MqttUser) (created bool, out MqttUser, err error) {
	if err := s.check(); err != nil {
		return false, MqttUser{}, err
	}
	out = MqttUser{Username: u.Username}
	var q string
	args := []any{u.Username, rules(u.Publish), rules(u.Subscribe)}
	if u.PasswordHash == "" {
		q = `UPDATE mqtt_users SET publish = $2, subscribe = $3, updated_at = now() WHERE user_name = $1
RETURNING false, password_hash, publish, subscribe, updated_at`
	} else {
		// xmax = 0 only for a row this statement inserted.
		q = `INSERT INTO mqtt_users (user_name, publish, subscribe, password_hash) VALUES ($1, $2, $3, $4)
ON CONFLICT (user_name) DO UPDATE SET password_hash = EXCLUDED.password_hash, publish = EXCLUDED.publish,
    subscribe = EXCLUDED.subscribe, updated_at = now()
RETURNING (xmax = 0), password_hash, publish, subscribe, updated_at`
		args = append(args, u.PasswordHash)
	}
	err = s.pool.QueryRow(ctx, q, args...).Scan(&created, &out.PasswordHash, &out.Publish, &out.Subscribe, &out.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, MqttUser{}, ErrMqttUserNotFound
	}
	if err != nil {
		return false, MqttUser{}, fmt.Errorf("put mqtt user: %w", err)
	}
	return created, out, nil
}

// DeleteMqttUser removes a user (ErrMqttUserNotFound when not kept).
func (s *Store) DeleteMqttUser(ctx context.Context, name string) error {
	if err := s.check(); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, "DELETE FROM mqtt_users WHERE user_name = $1", name)
	if err != nil {
		return fmt.Errorf("delete mqtt user: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrMqttUserNotFound
	}
	return nil
}

// GetMqttUser returns one user, hash included.
func (s *Store) GetMqttUser(ctx context.Context, name string) (*MqttUser, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	u := MqttUser{Username: name}
	err := s.pool.QueryRow(ctx, "SELECT password_hash, publish, subscribe, updated_at FROM mqtt_users WHERE user_name = $1", name).
		Scan(&u.PasswordHash, &u.Publish, &u.Subscribe, &u.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrMqttUserNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get mqtt user: %w", err)
	}
	return &u, nil
}

// ListMqttUsers returns every user by name, hashes included (the caller decides what
// to show).
func (s *Store) ListMqttUsers(ctx context.Context) ([]MqttUser, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, "SELECT user_name, password_hash, publish, subscribe, updated_at FROM mqtt_users ORDER BY user_name")
	if err != nil {
		return nil, fmt.Errorf("list mqtt users: %w", err)
	}
	users, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (MqttUser, error) {
		var u MqttUser
		err := r.Scan(&u.Username, &u.PasswordHash, &u.Publish, &u.Subscribe, &u.UpdatedAt)
		return u, err
	})
	if err != nil {
		return nil, fmt.Errorf("list mqtt users: %w", err)
	}
	return users, nil
}
