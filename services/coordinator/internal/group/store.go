package group

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// querier is what loadGroup needs: a transaction (locked reads or one snapshot).
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const groupColumns = `state, generation, protocol_type, protocol, leader, deadline, join_not_before, join_members, empty_since`

// snapshotGroup reads a group and its members without locking, from one snapshot: the
// group row and the member rows come from the same committed state (a read-only
// REPEATABLE READ transaction). Two plain statements could straddle a commit and pair
// one generation's join snapshot with the next generation's members.
func snapshotGroup(ctx context.Context, pool *pgxpool.Pool, id string) (*group, error) {
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("load group: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	return loadGroup(ctx, tx, id, false)
}

// loadGroup reads a group and its members. With lock it takes the group row lock
// (FOR UPDATE; q must be a transaction). A missing group comes back with exists false.
func loadGroup(ctx context.Context, q querier, id string, lock bool) (*group, error) {
	g := newGroup(id)
	sql := `SELECT ` + groupColumns + ` FROM consumer_groups WHERE group_id = $1`
	if lock {
		sql += ` FOR UPDATE`
	}
	var (
		state                        string
		deadline, notBefore, emptyAt *time.Time
		joinMembers                  []byte
	)
	err := q.QueryRow(ctx, sql, id).Scan(&state, &g.Generation, &g.ProtocolType, &g.Protocol, &g.Leader,
		&deadline, &notBefore, &joinMembers, &emptyAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return g, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load group: %w", err)
	}
	g.exists = true
	g.State = State(state)
	g.Deadline, g.JoinNotBefore, g.EmptySince = deref(deadline), deref(notBefore), deref(emptyAt)
	if len(joinMembers) > 0 {
		if err := json.Unmarshal(joinMembers, &g.JoinMembers); err != nil {
			return nil, fmt.Errorf("decode join members of group: %w", err)
		}
	}
	rows, err := q.Query(ctx, `SELECT member_id, group_instance_id, client_id, client_host, session_timeout_ms,
		rebalance_timeout_ms, protocol_type, protocol_names, protocol_metadata, assignment, pending, awaiting_join,
		synced, generation, session_deadline, joined_at
		FROM consumer_group_members WHERE group_id = $1`, id)
	if err != nil {
		return nil, fmt.Errorf("load members: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		m := &member{}
		var (
			sess, reb int32
			names     []string
			metas     [][]byte
		)
		if err := rows.Scan(&m.ID, &m.InstanceID, &m.ClientID, &m.ClientHost, &sess, &reb, &m.ProtocolType,
			&names, &metas, &m.Assignment, &m.Pending, &m.AwaitingJoin, &m.Synced, &m.Generation,
			&m.SessionDeadline, &m.JoinedAt); err != nil {
			return nil, fmt.Errorf("scan member: %w", err)
		}
		m.SessionTimeout = time.Duration(sess) * time.Millisecond
		m.RebalanceTimeout = time.Duration(reb) * time.Millisecond
		for i, n := range names {
			p := protocol{Name: n}
			if i < len(metas) {
				p.Metadata = metas[i]
			}
			m.Protocols = append(m.Protocols, p)
		}
		g.members[m.ID] = m
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load members: %w", err)
	}
	return g, nil
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// saveGroup writes back what changed: the group row, then deleted members (first, so
// a static member's replacement does not collide on the instance index), then new and
// changed members. A deleted group's row is removed (members and offsets cascade).
func saveGroup(ctx context.Context, tx pgx.Tx, g *group) error {
	if g.deleted {
		if g.exists {
			if _, err := tx.Exec(ctx, `DELETE FROM consumer_groups WHERE group_id = $1`, g.ID); err != nil {
				return fmt.Errorf("delete group: %w", err)
			}
		}
		return nil
	}
	if g.dirty || !g.exists {
		jm, err := json.Marshal(g.JoinMembers)
		if err != nil {
			return fmt.Errorf("encode join members: %w", err)
		}
		if g.JoinMembers == nil {
			jm = []byte("[]")
		}
		_, err = tx.Exec(ctx, `INSERT INTO consumer_groups (group_id, `+groupColumns+`, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, now())
			ON CONFLICT (group_id) DO UPDATE SET state = $2, generation = $3, protocol_type = $4, protocol = $5,
				leader = $6, deadline = $7, join_not_before = $8, join_members = $9, empty_since = $10, updated_at = now()`,
			g.ID, string(g.State), g.Generation, g.ProtocolType, g.Protocol, g.Leader, nullTime(g.Deadline),
			nullTime(g.JoinNotBefore), jm, nullTime(g.EmptySince))
		if err != nil {
			return fmt.Errorf("save group: %w", err)
		}
		g.exists = true
	}
	for _, m := range g.members {
		if !m.deleted || m.isNew {
			continue
		}
		if _, err := tx.Exec(ctx, `DELETE FROM consumer_group_members WHERE group_id = $1 AND member_id = $2`, g.ID, m.ID); err != nil {
			return fmt.Errorf("delete member: %w", err)
		}
	}
	for _, m := range g.members {
		if m.deleted || !m.dirty {
			continue
		}
		names := make([]string, len(m.Protocols))
		metas := make([][]byte, len(m.Protocols))
		for i, p := range m.Protocols {
			names[i] = p.Name
			metas[i] = p.Metadata
			if metas[i] == nil {
				metas[i] = []byte{}
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO consumer_group_members (group_id, member_id, group_instance_id, client_id,
				client_host, session_timeout_ms, rebalance_timeout_ms, protocol_type, protocol_names, protocol_metadata,
				assignment, pending, awaiting_join, synced, generation, session_deadline, joined_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
			ON CONFLICT (group_id, member_id) DO UPDATE SET group_instance_id = $3, client_id = $4, client_host = $5,
				session_timeout_ms = $6, rebalance_timeout_ms = $7, protocol_type = $8, protocol_names = $9,
				protocol_metadata = $10, assignment = $11, pending = $12, awaiting_join = $13, synced = $14,
				generation = $15, session_deadline = $16, joined_at = $17`,
			g.ID, m.ID, m.InstanceID, m.ClientID, m.ClientHost, int32(m.SessionTimeout/time.Millisecond),
			int32(m.RebalanceTimeout/time.Millisecond), m.ProtocolType, names, metas, m.Assignment, m.Pending,
			m.AwaitingJoin, m.Synced, m.Generation, m.SessionDeadline, m.JoinedAt)
		if err != nil {
			return fmt.Errorf("save member: %w", err)
		}
	}
	return nil
}
