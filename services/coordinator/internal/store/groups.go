package store

// Kafka classic consumer groups (migrations/00100_groups.sql): one consumer_groups row
// per group, its consumer_group_members rows, and its consumer_group_offsets rows. The
// group coordinator (internal/group) owns the state machine; these methods only read
// and write the rows. A group is changed under its row lock (GroupTx.LockGroup) in one
// transaction; see internal/group/LOCKS.md.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Group is a consumer_groups row. Zero times are stored as NULL.
type Group struct {
	ID           string
	State        string // Empty, PreparingRebalance, CompletingRebalance, Stable
	Generation   int32
	ProtocolType string
	Protocol     string
	Leader       string
	// Deadline ends the join phase or the wait for the leader's SyncGroup.
	Deadline      time.Time
	JoinNotBefore time.Time
	// JoinMembers is the JSON snapshot of the last completed join phase (opaque here);
	// stored as is, so the caller encodes an empty list as "[]".
	JoinMembers []byte
	EmptySince  time.Time
	// GroupType is GroupTypeClassic or GroupTypeConsumer (KIP-848); read only: the
	// classic coordinator's SaveGroup never changes it.
	GroupType string
}

// GroupMember is a consumer_group_members row. ProtocolNames and ProtocolMetadata are
// parallel (the member's protocols in preference order).
type GroupMember struct {
	ID                 string
	InstanceID         *string // KIP-345 group.instance.id; nil for a dynamic member
	ClientID           string
	ClientHost         string
	SessionTimeoutMs   int32
	RebalanceTimeoutMs int32
	ProtocolType       string
	ProtocolNames      []string
	ProtocolMetadata   [][]byte
	Assignment         []byte
	Pending            bool
	AwaitingJoin       bool
	Synced             bool
	Generation         int32
	SessionDeadline    time.Time
	JoinedAt           time.Time
}

// GroupOffset is a committed offset (consumer_group_offsets) of one partition.
type GroupOffset struct {
	Group       string // set by GroupOffsetsForMetrics only
	Topic       string
	Partition   int32
	Offset      int64
	LeaderEpoch int32
	Metadata    string
	CommitTime  time.Time
}

// GroupListing is a group as ListGroups shows it.
type GroupListing struct {
	ID           string
	ProtocolType string
	State        string
	GroupType    string // classic or consumer
}

const groupColumns = `state, generation, protocol_type, protocol, leader, deadline, join_not_before, join_members, empty_since`

// Ping checks that Postgres answers.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

// GroupTx is a read-write transaction over group rows; end it with Commit or Rollback.
type GroupTx struct {
	tx pgx.Tx
}

// BeginGroupTx starts a read-write transaction over group rows.
func (s *Store) BeginGroupTx(ctx context.Context) (*GroupTx, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		return nil, err
	}
	return &GroupTx{tx: tx}, nil
}

// Commit commits the transaction.
func (t *GroupTx) Commit(ctx context.Context) error { return t.tx.Commit(ctx) }

// Rollback rolls the transaction back; after Commit it does nothing.
func (t *GroupTx) Rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }

// LockGroup reads group id and its members under the group row lock (FOR UPDATE),
// held until the transaction ends. A missing group comes back as a nil *Group.
func (t *GroupTx) LockGroup(ctx context.Context, id string) (*Group, []GroupMember, error) {
	return loadGroup(ctx, t.tx, id, true)
}

// SnapshotGroup reads a group and its members without locking, from one snapshot: the
// group row and the member rows come from the same committed state (a read-only
// REPEATABLE READ transaction). Two plain statements could straddle a commit and pair
// one generation's join snapshot with the next generation's members. A missing group
// comes back as a nil *Group.
func (s *Store) SnapshotGroup(ctx context.Context, id string) (*Group, []GroupMember, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, nil, fmt.Errorf("load group: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	return loadGroup(ctx, tx, id, false)
}

func loadGroup(ctx context.Context, q querier, id string, lock bool) (*Group, []GroupMember, error) {
	g := &Group{ID: id}
	sql := `SELECT ` + groupColumns + `, group_type FROM consumer_groups WHERE group_id = $1`
	if lock {
		sql += ` FOR UPDATE`
	}
	var deadline, notBefore, emptyAt *time.Time
	err := q.QueryRow(ctx, sql, id).Scan(&g.State, &g.Generation, &g.ProtocolType, &g.Protocol, &g.Leader,
		&deadline, &notBefore, &g.JoinMembers, &emptyAt, &g.GroupType)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("load group: %w", err)
	}
	g.Deadline, g.JoinNotBefore, g.EmptySince = deref(deadline), deref(notBefore), deref(emptyAt)
	rows, err := q.Query(ctx, `SELECT member_id, group_instance_id, client_id, client_host, session_timeout_ms,
		rebalance_timeout_ms, protocol_type, protocol_names, protocol_metadata, assignment, pending, awaiting_join,
		synced, generation, session_deadline, joined_at
		FROM consumer_group_members WHERE group_id = $1`, id)
	if err != nil {
		return nil, nil, fmt.Errorf("load members: %w", err)
	}
	defer rows.Close()
	var members []GroupMember
	for rows.Next() {
		var m GroupMember
		if err := rows.Scan(&m.ID, &m.InstanceID, &m.ClientID, &m.ClientHost, &m.SessionTimeoutMs, &m.RebalanceTimeoutMs,
			&m.ProtocolType, &m.ProtocolNames, &m.ProtocolMetadata, &m.Assignment, &m.Pending, &m.AwaitingJoin, &m.Synced,
			&m.Generation, &m.SessionDeadline, &m.JoinedAt); err != nil {
			return nil, nil, fmt.Errorf("scan member: %w", err)
		}
		members = append(members, m)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("load members: %w", err)
	}
	return g, members, nil
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// InsertEmptyGroup creates group id as Empty unless it exists.
func (t *GroupTx) InsertEmptyGroup(ctx context.Context, id string) error {
	if _, err := t.tx.Exec(ctx, `INSERT INTO consumer_groups (group_id, state) VALUES ($1, 'Empty')
			ON CONFLICT (group_id) DO NOTHING`, id); err != nil {
		return fmt.Errorf("create group: %w", err)
	}
	return nil
}

// InsertEmptyShareGroup creates group id as an Empty share group unless a group of
// that id exists.
func (t *GroupTx) InsertEmptyShareGroup(ctx context.Context, id string) error {
	if _, err := t.tx.Exec(ctx, `INSERT INTO consumer_groups (group_id, state, protocol_type, group_type)
			VALUES ($1, 'Empty', 'share', 'share') ON CONFLICT (group_id) DO NOTHING`, id); err != nil {
		return fmt.Errorf("create group: %w", err)
	}
	return nil
}

// DeleteGroup removes group id; its members and offsets go with it (ON DELETE CASCADE),
// and so do its configs (Kafka's DeleteGroups removes them too).
func (t *GroupTx) DeleteGroup(ctx context.Context, id string) error {
	if _, err := t.tx.Exec(ctx, `DELETE FROM consumer_groups WHERE group_id = $1`, id); err != nil {
		return fmt.Errorf("delete group: %w", err)
	}
	if _, err := t.tx.Exec(ctx, `DELETE FROM group_configs WHERE group_id = $1`, id); err != nil {
		return fmt.Errorf("delete group configs: %w", err)
	}
	return nil
}

// SaveGroup inserts or updates the group row, setting updated_at to now.
func (t *GroupTx) SaveGroup(ctx context.Context, g *Group) error {
	_, err := t.tx.Exec(ctx, `INSERT INTO consumer_groups (group_id, `+groupColumns+`, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, now())
			ON CONFLICT (group_id) DO UPDATE SET state = $2, generation = $3, protocol_type = $4, protocol = $5,
				leader = $6, deadline = $7, join_not_before = $8, join_members = $9, empty_since = $10, updated_at = now()`,
		g.ID, g.State, g.Generation, g.ProtocolType, g.Protocol, g.Leader, nullTime(g.Deadline),
		nullTime(g.JoinNotBefore), g.JoinMembers, nullTime(g.EmptySince))
	if err != nil {
		return fmt.Errorf("save group: %w", err)
	}
	return nil
}

// DeleteGroupMember removes member memberID of group groupID.
func (t *GroupTx) DeleteGroupMember(ctx context.Context, groupID, memberID string) error {
	if _, err := t.tx.Exec(ctx, `DELETE FROM consumer_group_members WHERE group_id = $1 AND member_id = $2`, groupID, memberID); err != nil {
		return fmt.Errorf("delete member: %w", err)
	}
	return nil
}

// SaveGroupMember inserts or updates member m of group groupID.
func (t *GroupTx) SaveGroupMember(ctx context.Context, groupID string, m *GroupMember) error {
	_, err := t.tx.Exec(ctx, `INSERT INTO consumer_group_members (group_id, member_id, group_instance_id, client_id,
				client_host, session_timeout_ms, rebalance_timeout_ms, protocol_type, protocol_names, protocol_metadata,
				assignment, pending, awaiting_join, synced, generation, session_deadline, joined_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
			ON CONFLICT (group_id, member_id) DO UPDATE SET group_instance_id = $3, client_id = $4, client_host = $5,
				session_timeout_ms = $6, rebalance_timeout_ms = $7, protocol_type = $8, protocol_names = $9,
				protocol_metadata = $10, assignment = $11, pending = $12, awaiting_join = $13, synced = $14,
				generation = $15, session_deadline = $16, joined_at = $17`,
		groupID, m.ID, m.InstanceID, m.ClientID, m.ClientHost, m.SessionTimeoutMs, m.RebalanceTimeoutMs, m.ProtocolType,
		m.ProtocolNames, m.ProtocolMetadata, m.Assignment, m.Pending, m.AwaitingJoin, m.Synced, m.Generation,
		m.SessionDeadline, m.JoinedAt)
	if err != nil {
		return fmt.Errorf("save member: %w", err)
	}
	return nil
}

// SaveGroupOffsets writes the committed offsets of group groupID in one round trip
// (Topic, Partition, Offset, LeaderEpoch and Metadata of each), all with commit time at.
func (t *GroupTx) SaveGroupOffsets(ctx context.Context, groupID string, offsets []GroupOffset, at time.Time) error {
	if len(offsets) == 0 {
		return nil
	}
	batch := &pgx.Batch{}
	for _, o := range offsets {
		batch.Queue(`INSERT INTO consumer_group_offsets (group_id, topic, partition, committed_offset, leader_epoch,
						metadata, commit_time) VALUES ($1, $2, $3, $4, $5, $6, $7)
					ON CONFLICT (group_id, topic, partition) DO UPDATE SET committed_offset = $4, leader_epoch = $5,
						metadata = $6, commit_time = $7`,
			groupID, o.Topic, o.Partition, o.Offset, o.LeaderEpoch, o.Metadata, at)
	}
	if err := t.tx.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("commit offsets: %w", err)
	}
	return nil
}

// DeleteGroupOffset removes the committed offset of one partition of group groupID.
func (t *GroupTx) DeleteGroupOffset(ctx context.Context, groupID, topic string, partition int32) error {
	if _, err := t.tx.Exec(ctx, `DELETE FROM consumer_group_offsets WHERE group_id = $1 AND topic = $2 AND partition = $3`,
		groupID, topic, partition); err != nil {
		return fmt.Errorf("delete offset: %w", err)
	}
	return nil
}

// GroupOffsets returns the committed offsets of group groupID, of topic only when it
// is not empty, in no particular order.
func (s *Store) GroupOffsets(ctx context.Context, groupID, topic string) ([]GroupOffset, error) {
	rows, err := s.pool.Query(ctx, `SELECT topic, partition, committed_offset, leader_epoch, metadata, commit_time
		FROM consumer_group_offsets WHERE group_id = $1 AND ($2 = '' OR topic = $2)`, groupID, topic)
	if err != nil {
		return nil, fmt.Errorf("read offsets: %w", err)
	}
	defer rows.Close()
	var out []GroupOffset
	for rows.Next() {
		var o GroupOffset
		if err := rows.Scan(&o.Topic, &o.Partition, &o.Offset, &o.LeaderEpoch, &o.Metadata, &o.CommitTime); err != nil {
			return nil, fmt.Errorf("scan offset: %w", err)
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

// GroupOffsetsForMetrics returns up to limit committed offsets (Group, Topic, Partition
// and Offset set), ordered by group, topic and partition. A row that cannot be read
// ends the list early (the gauges show what was read); only a failed query is an error.
func (s *Store) GroupOffsetsForMetrics(ctx context.Context, limit int) ([]GroupOffset, error) {
	rows, err := s.pool.Query(ctx, `SELECT group_id, topic, partition, committed_offset FROM consumer_group_offsets
		ORDER BY group_id, topic, partition LIMIT $1`, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []GroupOffset
	for rows.Next() {
		var o GroupOffset
		if err := rows.Scan(&o.Group, &o.Topic, &o.Partition, &o.Offset); err != nil {
			break
		}
		out = append(out, o)
	}
	return out, nil
}

// ListGroups returns every group, ordered by id.
func (s *Store) ListGroups(ctx context.Context) ([]GroupListing, error) {
	rows, err := s.pool.Query(ctx, `SELECT group_id, protocol_type, state, group_type FROM consumer_groups ORDER BY group_id`)
	if err != nil {
		return nil, fmt.Errorf("list groups: %w", err)
	}
	defer rows.Close()
	var out []GroupListing
	for rows.Next() {
		var l GroupListing
		if err := rows.Scan(&l.ID, &l.ProtocolType, &l.State, &l.GroupType); err != nil {
			return nil, fmt.Errorf("scan group: %w", err)
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// DueGroups returns the ids of the groups with a deadline or join_not_before at or
// before now, or a member (not awaiting its JoinGroup answer) whose session deadline
// is at or before now: the groups the sweep must look at.
func (s *Store) DueGroups(ctx context.Context, now time.Time) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT group_id FROM consumer_groups WHERE deadline <= $1 OR join_not_before <= $1
		UNION SELECT group_id FROM consumer_group_members WHERE session_deadline <= $1 AND NOT awaiting_join`, now)
	if err != nil {
		return nil, fmt.Errorf("find expired groups: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("scan group id: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("find expired groups: %w", err)
	}
	return ids, nil
}

// ExpireGroupOffsets deletes the committed offsets of Empty groups whose later of
// empty_since and the offset's commit time is before cutoff (KIP-211), and returns how
// many it deleted.
func (s *Store) ExpireGroupOffsets(ctx context.Context, cutoff time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM consumer_group_offsets o USING consumer_groups g
		WHERE o.group_id = g.group_id AND g.state = 'Empty' AND GREATEST(g.empty_since, o.commit_time) < $1`, cutoff)
	if err != nil {
		return 0, fmt.Errorf("expire offsets: %w", err)
	}
	return tag.RowsAffected(), nil
}

// DeleteEmptyGroups deletes the Empty groups last updated before updatedBefore that
// have no committed offsets and no members, and returns their ids. Share groups are
// kept (Kafka never expires them: their share-partition state outlives their members). On an error it
// returns the ids deleted and read before it.
func (s *Store) DeleteEmptyGroups(ctx context.Context, updatedBefore time.Time) ([]string, error) {
	rows, err := s.pool.Query(ctx, `DELETE FROM consumer_groups g WHERE g.state = 'Empty' AND g.updated_at < $1 AND g.group_type <> 'share'
		AND NOT EXISTS (SELECT 1 FROM consumer_group_offsets o WHERE o.group_id = g.group_id)
		AND NOT EXISTS (SELECT 1 FROM consumer_group_members m WHERE m.group_id = g.group_id)
		RETURNING g.group_id`, updatedBefore)
	if err != nil {
		return nil, fmt.Errorf("delete empty groups: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err == nil {
			ids = append(ids, id)
		}
	}
	return ids, rows.Err()
}

// GroupPendingTxnOffsets returns the partitions of group groupID whose offsets an open
// transaction has staged (TxnOffsetCommit), for OffsetFetch's require_stable (KIP-447).
func (s *Store) GroupPendingTxnOffsets(ctx context.Context, groupID string) (map[TxnPartition]bool, error) {
	return PendingTxnOffsets(ctx, s.pool, groupID)
}

// GroupCommitMember is what a transactional offset commit (KIP-447) checks of its group
// inside tx: the group's generation and, for member id memberID, whether that member
// is a full (not pending) member and its static group.instance.id (nil for a dynamic
// member). GroupFound is false when the group has no row; MemberFound is false when
// the member is unknown or still pending.
type GroupCommitMember struct {
	GroupFound, MemberFound bool
	Generation              int32
	InstanceID              *string
}

// LookupGroupCommitMember reads what GroupCommitMember describes for group and memberID
// inside tx (no rows are locked).
func LookupGroupCommitMember(ctx context.Context, tx pgx.Tx, group, memberID string) (GroupCommitMember, error) {
	var m GroupCommitMember
	err := tx.QueryRow(ctx, `SELECT generation FROM consumer_groups WHERE group_id = $1`, group).Scan(&m.Generation)
	if errors.Is(err, pgx.ErrNoRows) {
		return m, nil
	}
	if err != nil {
		return m, fmt.Errorf("read group: %w", err)
	}
	m.GroupFound = true
	err = tx.QueryRow(ctx, `SELECT group_instance_id FROM consumer_group_members WHERE group_id = $1 AND member_id = $2 AND NOT pending`,
		group, memberID).Scan(&m.InstanceID)
	if errors.Is(err, pgx.ErrNoRows) {
		return m, nil
	}
	if err != nil {
		return m, fmt.Errorf("read group member: %w", err)
	}
	m.MemberFound = true
	return m, nil
}
