package store

// Kafka group configs (migrations/00610_group_configs.sql): the overrides set on a
// group id. internal/consumergroup knows the names and checks the values.

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// GroupConfigs returns the configs set on group id (name -> value; empty when none).
func (s *Store) GroupConfigs(ctx context.Context, id string) (map[string]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT name, value FROM group_configs WHERE group_id = $1`, id)
	if err != nil {
		return nil, fmt.Errorf("load group configs: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var n, v string
		if err := rows.Scan(&n, &v); err != nil {
			return nil, fmt.Errorf("load group configs: %w", err)
		}
		out[n] = v
	}
	return out, rows.Err()
}

// AlterGroupConfigs sets the configs in set and removes those in del on group id, in
// one transaction.
func (s *Store) AlterGroupConfigs(ctx context.Context, id string, set map[string]string, del []string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for n, v := range set {
			if _, err := tx.Exec(ctx, `INSERT INTO group_configs (group_id, name, value) VALUES ($1, $2, $3)
					ON CONFLICT (group_id, name) DO UPDATE SET value = $3`, id, n, v); err != nil {
				return fmt.Errorf("set group config: %w", err)
			}
		}
		if len(del) > 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM group_configs WHERE group_id = $1 AND name = ANY($2)`, id, del); err != nil {
				return fmt.Errorf("delete group configs: %w", err)
			}
		}
		return nil
	})
}
