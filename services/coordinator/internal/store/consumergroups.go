package store

// KIP-848 consumer groups (migrations/00500_consumer_groups_848.sql) and KIP-932 share
// groups (migrations/00600_share_groups.sql): a consumer group is a consumer_groups row
// with group_type 'consumer' plus its consumer_group_848 document, a share group a row
// with group_type 'share' plus its share_group_932 document. internal/consumergroup
// owns the documents' shapes; these methods only read and write rows, inside a GroupTx
// that holds the group row lock (GroupTx.LockGroup).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Group types (consumer_groups.group_type), as Kafka's ListGroups v5 names them.
const (
	GroupTypeClassic  = "classic"
	GroupTypeConsumer = "consumer"
	GroupTypeShare    = "share"
)

// docTable is the table of the documents of groups of type groupType (consumer or
// share); the protocol type of such a group is its group type.
func docTable(groupType string) string {
	if groupType == GroupTypeShare {
		return "share_group_932"
	}
	return "consumer_group_848"
}

// ConsumerGroupDoc returns the stored document of consumer group id (nil when there is
// none). Call it after LockGroup in the same transaction.
func (t *GroupTx) ConsumerGroupDoc(ctx context.Context, id string) ([]byte, error) {
	return groupDoc(ctx, t.tx, GroupTypeConsumer, id)
}

// ShareGroupDoc returns the stored document of share group id (nil when there is
// none). Call it after LockGroup in the same transaction.
func (t *GroupTx) ShareGroupDoc(ctx context.Context, id string) ([]byte, error) {
	return groupDoc(ctx, t.tx, GroupTypeShare, id)
}

func groupDoc(ctx context.Context, q querier, groupType, id string) ([]byte, error) {
	var doc []byte
	err := q.QueryRow(ctx, `SELECT doc FROM `+docTable(groupType)+` WHERE group_id = $1`, id).Scan(&doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load %s group: %w", groupType, err)
	}
	return doc, nil
}

// SaveConsumerGroup makes group id a consumer group (protocol type "consumer") in
// state with document doc, and records the earliest deadline the sweep must look at
// (zero: none). emptySince is when the group last became Empty (zero while it has
// members).
func (t *GroupTx) SaveConsumerGroup(ctx context.Context, id, state string, doc []byte, nextDeadline, emptySince time.Time) error {
	return t.saveModernGroup(ctx, GroupTypeConsumer, id, state, doc, nextDeadline, emptySince)
}

// SaveShareGroup makes group id a share group (protocol type "share") in state with
// document doc, as SaveConsumerGroup does for consumer groups.
func (t *GroupTx) SaveShareGroup(ctx context.Context, id, state string, doc []byte, nextDeadline, emptySince time.Time) error {
	return t.saveModernGroup(ctx, GroupTypeShare, id, state, doc, nextDeadline, emptySince)
}

func (t *GroupTx) saveModernGroup(ctx context.Context, groupType, id, state string, doc []byte, nextDeadline, emptySince time.Time) error {
	if _, err := t.tx.Exec(ctx, `INSERT INTO consumer_groups (group_id, state, protocol_type, group_type, empty_since, updated_at)
			VALUES ($1, $2, $4, $4, $3, now())
			ON CONFLICT (group_id) DO UPDATE SET state = $2, protocol_type = $4, group_type = $4,
				generation = 0, protocol = '', leader = '', deadline = NULL, join_not_before = NULL,
				join_members = '[]'::jsonb, empty_since = $3, updated_at = now()`,
		id, state, nullTime(emptySince), groupType); err != nil {
		return fmt.Errorf("save %s group: %w", groupType, err)
	}
	if _, err := t.tx.Exec(ctx, `INSERT INTO `+docTable(groupType)+` (group_id, doc, next_deadline) VALUES ($1, $2, $3)
			ON CONFLICT (group_id) DO UPDATE SET doc = $2, next_deadline = $3`, id, doc, nullTime(nextDeadline)); err != nil {
		return fmt.Errorf("save %s group: %w", groupType, err)
	}
	return nil
}

// ConvertToClassic turns an empty consumer group back into an empty classic group
// (KIP-848 online downgrade), keeping its committed offsets.
func (t *GroupTx) ConvertToClassic(ctx context.Context, id string) error {
	if _, err := t.tx.Exec(ctx, `DELETE FROM consumer_group_848 WHERE group_id = $1`, id); err != nil {
		return fmt.Errorf("convert group: %w", err)
	}
	if _, err := t.tx.Exec(ctx, `UPDATE consumer_groups SET group_type = 'classic', state = 'Empty', protocol_type = '',
			updated_at = now() WHERE group_id = $1`, id); err != nil {
		return fmt.Errorf("convert group: %w", err)
	}
	return nil
}

// SnapshotConsumerGroup reads a group row and its consumer group document (nil unless
// it is a consumer group) from one read-only snapshot. A missing group is a nil *Group.
func (s *Store) SnapshotConsumerGroup(ctx context.Context, id string) (*Group, []byte, error) {
	return s.snapshotModernGroup(ctx, GroupTypeConsumer, id)
}

// SnapshotShareGroup reads a group row and its share group document (nil unless it is
// a share group) from one read-only snapshot. A missing group is a nil *Group.
func (s *Store) SnapshotShareGroup(ctx context.Context, id string) (*Group, []byte, error) {
	return s.snapshotModernGroup(ctx, GroupTypeShare, id)
}

func (s *Store) snapshotModernGroup(ctx context.Context, groupType, id string) (*Group, []byte, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, nil, fmt.Errorf("load %s group: begin: %w", groupType, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	g, _, err := loadGroup(ctx, tx, id, false)
	if err != nil || g == nil {
		return nil, nil, err
	}
	doc, err := groupDoc(ctx, tx, groupType, id)
	return g, doc, err
}

// DueConsumerGroups returns the consumer groups whose next deadline (a member session
// or revocation timeout) is at or before now.
func (s *Store) DueConsumerGroups(ctx context.Context, now time.Time) ([]string, error) {
	return s.dueModernGroups(ctx, GroupTypeConsumer, now)
}

// DueShareGroups returns the share groups whose next deadline (a member session
// timeout) is at or before now.
func (s *Store) DueShareGroups(ctx context.Context, now time.Time) ([]string, error) {
	return s.dueModernGroups(ctx, GroupTypeShare, now)
}

func (s *Store) dueModernGroups(ctx context.Context, groupType string, now time.Time) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT group_id FROM `+docTable(groupType)+` WHERE next_deadline <= $1`, now)
	if err != nil {
		return nil, fmt.Errorf("find due %s groups: %w", groupType, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("find due %s groups: %w", groupType, err)
	}
	return ids, nil
}
