package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tributary/tributary/libs/kafkaacl"
)

// aclAdvisoryLock serializes DeleteAcls across coordinator replicas (a transaction-level
// advisory lock), so two deletes never report the same binding as theirs.
const aclAdvisoryLock = 0x6b61636c // "kacl"

const aclColumns = `resource_type, resource_name, pattern_type, principal, host, operation, permission_type`

// InsertAcls stores bindings (migration 00410); one stored already is kept once. It
// reports whether any row was added.
func (s *Store) InsertAcls(ctx context.Context, bs []kafkaacl.Binding) (bool, error) {
	if len(bs) == 0 {
		return false, nil
	}
	added := false
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		var batch pgx.Batch
		for _, b := range bs {
			batch.Queue(`INSERT INTO kafka_acls (`+aclColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`,
				int16(b.ResourceType), b.ResourceName, int16(b.PatternType), b.Principal, b.Host, int16(b.Operation), int16(b.Permission))
		}
		br := tx.SendBatch(ctx, &batch)
		for range bs {
			tag, err := br.Exec()
			if err != nil {
				_ = br.Close()
				return fmt.Errorf("insert acl: %w", err)
			}
			added = added || tag.RowsAffected() > 0
		}
		return br.Close()
	})
	return added, err
}

// Acls returns every stored binding, sorted by resource type, pattern type, name,
// principal, host, operation, permission.
func (s *Store) Acls(ctx context.Context) ([]kafkaacl.Binding, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+aclColumns+` FROM kafka_acls ORDER BY resource_type, pattern_type, resource_name, principal, host, operation, permission_type`)
	if err != nil {
		return nil, fmt.Errorf("list acls: %w", err)
	}
	return scanAcls(rows)
}

func scanAcls(rows pgx.Rows) ([]kafkaacl.Binding, error) {
	defer rows.Close()
	var out []kafkaacl.Binding
	for rows.Next() {
		var rt, pt, op, perm int16
		var b kafkaacl.Binding
		if err := rows.Scan(&rt, &b.ResourceName, &pt, &b.Principal, &b.Host, &op, &perm); err != nil {
			return nil, fmt.Errorf("scan acl: %w", err)
		}
		b.ResourceType, b.PatternType = kafkaacl.ResourceType(rt), kafkaacl.PatternType(pt)
		b.Operation, b.Permission = kafkaacl.Operation(op), kafkaacl.Permission(perm)
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list acls: %w", err)
	}
	return out, nil
}

// DeleteAcls removes, for each filter in order, the bindings it matches that an
// earlier filter did not already remove, and returns them per filter; all in one
// Postgres transaction under an advisory lock. The filters must be valid.
func (s *Store) DeleteAcls(ctx context.Context, filters []kafkaacl.Filter) ([][]kafkaacl.Binding, error) {
	out := make([][]kafkaacl.Binding, len(filters))
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(aclAdvisoryLock)); err != nil {
			return fmt.Errorf("lock acls: %w", err)
		}
		rows, err := tx.Query(ctx, `SELECT `+aclColumns+` FROM kafka_acls ORDER BY resource_type, pattern_type, resource_name, principal, host, operation, permission_type`)
		if err != nil {
			return fmt.Errorf("list acls: %w", err)
		}
		all, err := scanAcls(rows)
		if err != nil {
			return err
		}
		gone := make([]bool, len(all))
		var batch pgx.Batch
		for i, f := range filters {
			for j, b := range all {
				if gone[j] || !f.Matches(b) {
					continue
				}
				gone[j] = true
				out[i] = append(out[i], b)
				batch.Queue(`DELETE FROM kafka_acls WHERE resource_type = $1 AND resource_name = $2 AND pattern_type = $3
					AND principal = $4 AND host = $5 AND operation = $6 AND permission_type = $7`,
					int16(b.ResourceType), b.ResourceName, int16(b.PatternType), b.Principal, b.Host, int16(b.Operation), int16(b.Permission))
			}
		}
		if batch.Len() == 0 {
			return nil
		}
		if err := tx.SendBatch(ctx, &batch).Close(); err != nil {
			return fmt.Errorf("delete acls: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
