package group

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	"github.com/tributary/tributary/services/coordinator/internal/store"
)

// OffsetCommit implements Kafka's handleCommitOffsets: offsets are written to Postgres
// before the answer. A commit with generation -1 and no member id comes from a client
// that does not use group management and needs the group to be Empty (a missing group
// is created Empty, as Kafka does).
func (c *Coordinator) OffsetCommit(ctx context.Context, req *coordinatorv1.OffsetCommitRequest) (_ *coordinatorv1.OffsetCommitResponse, err error) {
	defer func() { err = grpcError(err) }()
	if err := c.check(); err != nil {
		return nil, err
	}
	resp := &coordinatorv1.OffsetCommitResponse{}
	all := func(code int32) *coordinatorv1.OffsetCommitResponse {
		out := &coordinatorv1.OffsetCommitResponse{}
		for _, t := range req.GetTopics() {
			rt := &coordinatorv1.TopicPartitionResults{Name: t.GetName()}
			for _, p := range t.GetPartitions() {
				rt.Partitions = append(rt.Partitions, &coordinatorv1.PartitionResult{Partition: p.GetPartition(), ErrorCode: code})
			}
			out.Topics = append(out.Topics, rt)
		}
		return out
	}
	gid, gen, memberID := req.GetGroupId(), req.GetGenerationId(), req.GetMemberId()
	if gid == "" {
		return all(codeInvalidGroupID), nil
	}
	var instanceID *string
	if req.GroupInstanceId != nil {
		v := req.GetGroupInstanceId()
		instanceID = &v
	}
	simple := gen < 0 && memberID == "" && instanceID == nil
	tx, err := c.pool.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		return nil, fmt.Errorf("%w: begin: %v", ErrNotReady, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	err = c.withGroupTx(ctx, tx, gid, simple, func(g *group, now time.Time) error {
		code := codeNone
		switch {
		case !g.exists && !simple:
			code = codeIllegalGeneration
		case !simple:
			code = g.validateMember(memberID, instanceID, &gen)
			if code == codeNone && g.State == StateCompletingRebalance {
				code = codeRebalanceInProgress
			}
		case len(g.active()) > 0:
			code = codeUnknownMemberID
		}
		if code != codeNone {
			resp = all(code)
			return errSkip
		}
		if m := g.member(memberID); m != nil && g.State == StateStable {
			m.SessionDeadline, m.dirty = now.Add(m.SessionTimeout), true
		}
		batch := &pgx.Batch{}
		for _, t := range req.GetTopics() {
			rt := &coordinatorv1.TopicPartitionResults{Name: t.GetName()}
			for _, p := range t.GetPartitions() {
				r := &coordinatorv1.PartitionResult{Partition: p.GetPartition()}
				rt.Partitions = append(rt.Partitions, r)
				if len(p.GetMetadata()) > c.cfg.MaxMetadataSize {
					r.ErrorCode = codeOffsetMetadataTooLarge
					continue
				}
				batch.Queue(`INSERT INTO consumer_group_offsets (group_id, topic, partition, committed_offset, leader_epoch,
						metadata, commit_time) VALUES ($1, $2, $3, $4, $5, $6, $7)
					ON CONFLICT (group_id, topic, partition) DO UPDATE SET committed_offset = $4, leader_epoch = $5,
						metadata = $6, commit_time = $7`,
					gid, t.GetName(), p.GetPartition(), p.GetCommittedOffset(), p.GetCommittedLeaderEpoch(), p.GetMetadata(), now)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		if batch.Len() > 0 {
			if err := tx.SendBatch(ctx, batch).Close(); err != nil {
				return fmt.Errorf("commit offsets: %w", err)
			}
			g.wrote = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// withGroupTx is withGroup's work in the caller's transaction tx: it commits tx when fn
// returns nil and leaves it for the caller to roll back otherwise (errSkip: no error).
func (c *Coordinator) withGroupTx(ctx context.Context, tx pgx.Tx, id string, create bool, fn func(g *group, now time.Time) error) error {
	g, err := loadGroup(ctx, tx, id, true)
	if err != nil {
		return err
	}
	inserted := false
	if !g.exists && create {
		if _, err := tx.Exec(ctx, `INSERT INTO consumer_groups (group_id, state) VALUES ($1, 'Empty')
			ON CONFLICT (group_id) DO NOTHING`, id); err != nil {
			return fmt.Errorf("create group: %w", err)
		}
		if g, err = loadGroup(ctx, tx, id, true); err != nil {
			return err
		}
		inserted = g.exists
	}
	err = fn(g, c.now())
	if errors.Is(err, errSkip) {
		return nil
	}
	if err != nil {
		return err
	}
	if inserted && !g.dirty && !g.wrote {
		return nil
	}
	if err := saveGroup(ctx, tx, g); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if g.changed {
		if err := c.notify.publish(id); err != nil {
			c.log.Warn("publish group change", zap.String("group", id), zap.Error(err))
		}
	}
	return nil
}

type storedOffset struct {
	Offset   int64
	Epoch    int32
	Metadata string
	Time     time.Time
}

type tp struct {
	Topic     string
	Partition int32
}

func (c *Coordinator) readOffsets(ctx context.Context, gid, topic string) (map[tp]storedOffset, error) {
	rows, err := c.pool.Query(ctx, `SELECT topic, partition, committed_offset, leader_epoch, metadata, commit_time
		FROM consumer_group_offsets WHERE group_id = $1 AND ($2 = '' OR topic = $2)`, gid, topic)
	if err != nil {
		return nil, fmt.Errorf("%w: read offsets: %v", ErrNotReady, err)
	}
	defer rows.Close()
	out := map[tp]storedOffset{}
	for rows.Next() {
		var (
			k tp
			o storedOffset
		)
		if err := rows.Scan(&k.Topic, &k.Partition, &o.Offset, &o.Epoch, &o.Metadata, &o.Time); err != nil {
			return nil, fmt.Errorf("scan offset: %w", err)
		}
		out[k] = o
	}
	return out, rows.Err()
}

func sortedKeys(m map[tp]storedOffset) []tp {
	keys := make([]tp, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Topic != keys[j].Topic {
			return keys[i].Topic < keys[j].Topic
		}
		return keys[i].Partition < keys[j].Partition
	})
	return keys
}

// OffsetFetch implements Kafka's handleFetchOffsets for each group (KIP-709). Partitions
// without a commit answer offset -1; an unknown group is not an error. With
// require_stable (KIP-447) a partition whose offset an open transaction has staged
// (TxnOffsetCommit) answers UNSTABLE_OFFSET_COMMIT (88), offset -1.
func (c *Coordinator) OffsetFetch(ctx context.Context, req *coordinatorv1.OffsetFetchRequest) (_ *coordinatorv1.OffsetFetchResponse, err error) {
	defer func() { err = grpcError(err) }()
	if err := c.check(); err != nil {
		return nil, err
	}
	resp := &coordinatorv1.OffsetFetchResponse{}
	for _, rg := range req.GetGroups() {
		fg := &coordinatorv1.FetchedGroup{GroupId: rg.GetGroupId()}
		resp.Groups = append(resp.Groups, fg)
		if rg.GetGroupId() == "" {
			fg.ErrorCode = codeInvalidGroupID
			continue
		}
		offs, err := c.readOffsets(ctx, rg.GetGroupId(), "")
		if err != nil {
			return nil, err
		}
		var unstable map[store.TxnPartition]bool
		if req.GetRequireStable() {
			if unstable, err = store.PendingTxnOffsets(ctx, c.pool, rg.GetGroupId()); err != nil {
				return nil, fmt.Errorf("%w: %v", ErrNotReady, err)
			}
		}
		fetched := func(k tp) *coordinatorv1.FetchedPartition {
			if unstable[store.TxnPartition{Topic: k.Topic, Partition: k.Partition}] {
				// KIP-447: a transaction holds offsets of this partition not yet
				// committed; the client retries.
				return &coordinatorv1.FetchedPartition{Partition: k.Partition, CommittedOffset: -1, CommittedLeaderEpoch: -1,
					ErrorCode: codeUnstableOffsetCommit}
			}
			o, ok := offs[k]
			if !ok {
				return &coordinatorv1.FetchedPartition{Partition: k.Partition, CommittedOffset: -1, CommittedLeaderEpoch: -1}
			}
			return &coordinatorv1.FetchedPartition{Partition: k.Partition, CommittedOffset: o.Offset,
				CommittedLeaderEpoch: o.Epoch, Metadata: o.Metadata, CommitTimeMs: o.Time.UnixMilli()}
		}
		if rg.GetAllTopics() {
			var cur *coordinatorv1.FetchedTopic
			for _, k := range sortedKeys(offs) {
				if cur == nil || cur.Name != k.Topic {
					cur = &coordinatorv1.FetchedTopic{Name: k.Topic}
					fg.Topics = append(fg.Topics, cur)
				}
				cur.Partitions = append(cur.Partitions, fetched(k))
			}
			continue
		}
		for _, t := range rg.GetTopics() {
			ft := &coordinatorv1.FetchedTopic{Name: t.GetName()}
			for _, p := range t.GetPartitions() {
				ft.Partitions = append(ft.Partitions, fetched(tp{t.GetName(), p}))
			}
			fg.Topics = append(fg.Topics, ft)
		}
	}
	return resp, nil
}

// ReadCommittedOffsets returns a group's committed offsets, read-only.
func (c *Coordinator) ReadCommittedOffsets(ctx context.Context, req *coordinatorv1.ReadCommittedOffsetsRequest) (_ *coordinatorv1.ReadCommittedOffsetsResponse, err error) {
	defer func() { err = grpcError(err) }()
	if err := c.check(); err != nil {
		return nil, err
	}
	resp := &coordinatorv1.ReadCommittedOffsetsResponse{}
	if req.GetGroupId() == "" {
		resp.ErrorCode = codeInvalidGroupID
		return resp, nil
	}
	g, err := snapshotGroup(ctx, c.pool, req.GetGroupId())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotReady, err)
	}
	if !g.exists {
		resp.ErrorCode, resp.State = codeGroupIDNotFound, string(StateDead)
		return resp, nil
	}
	resp.State = string(g.State)
	offs, err := c.readOffsets(ctx, req.GetGroupId(), req.GetTopic())
	if err != nil {
		return nil, err
	}
	for _, k := range sortedKeys(offs) {
		o := offs[k]
		resp.Offsets = append(resp.Offsets, &coordinatorv1.CommittedOffset{Topic: k.Topic, Partition: k.Partition,
			CommittedOffset: o.Offset, CommittedLeaderEpoch: o.Epoch, Metadata: o.Metadata, CommitTimeMs: o.Time.UnixMilli()})
	}
	return resp, nil
}

// DescribeGroups implements Kafka's handleDescribeGroup: an unknown group is Dead with
// no error; member metadata and assignments are shown only while the group is Stable.
func (c *Coordinator) DescribeGroups(ctx context.Context, req *coordinatorv1.DescribeGroupsRequest) (_ *coordinatorv1.DescribeGroupsResponse, err error) {
	defer func() { err = grpcError(err) }()
	if err := c.check(); err != nil {
		return nil, err
	}
	resp := &coordinatorv1.DescribeGroupsResponse{}
	for _, id := range req.GetGroupIds() {
		dg := &coordinatorv1.DescribedGroup{GroupId: id, State: string(StateDead)}
		resp.Groups = append(resp.Groups, dg)
		if id == "" {
			dg.ErrorCode = codeInvalidGroupID
			continue
		}
		g, err := snapshotGroup(ctx, c.pool, id)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrNotReady, err)
		}
		if !g.exists {
			continue
		}
		dg.State, dg.ProtocolType, dg.Protocol = string(g.State), g.ProtocolType, g.Protocol
		for _, m := range g.active() {
			dm := &coordinatorv1.DescribedMember{MemberId: m.ID, GroupInstanceId: m.InstanceID, ClientId: m.ClientID, ClientHost: m.ClientHost}
			if g.State == StateStable {
				dm.Metadata, dm.Assignment = m.metadataFor(g.Protocol), m.Assignment
			}
			dg.Members = append(dg.Members, dm)
		}
	}
	return resp, nil
}

// ListGroups implements Kafka's handleListGroups with the KIP-518 state filter
// (case-insensitive) and a protocol-type filter.
func (c *Coordinator) ListGroups(ctx context.Context, req *coordinatorv1.ListGroupsRequest) (_ *coordinatorv1.ListGroupsResponse, err error) {
	defer func() { err = grpcError(err) }()
	if err := c.check(); err != nil {
		return nil, err
	}
	rows, err := c.pool.Query(ctx, `SELECT group_id, protocol_type, state FROM consumer_groups ORDER BY group_id`)
	if err != nil {
		return nil, fmt.Errorf("%w: list groups: %v", ErrNotReady, err)
	}
	defer rows.Close()
	resp := &coordinatorv1.ListGroupsResponse{}
	for rows.Next() {
		lg := &coordinatorv1.ListedGroup{}
		if err := rows.Scan(&lg.GroupId, &lg.ProtocolType, &lg.State); err != nil {
			return nil, fmt.Errorf("scan group: %w", err)
		}
		if matches(req.GetStatesFilter(), lg.State) && matches(req.GetTypesFilter(), lg.ProtocolType) {
			resp.Groups = append(resp.Groups, lg)
		}
	}
	return resp, rows.Err()
}

func matches(filter []string, v string) bool {
	if len(filter) == 0 {
		return true
	}
	for _, f := range filter {
		if strings.EqualFold(f, v) {
			return true
		}
	}
	return false
}

// DeleteGroups implements Kafka's handleDeleteGroups: only Empty groups (no members)
// are deleted, with their committed offsets.
func (c *Coordinator) DeleteGroups(ctx context.Context, req *coordinatorv1.DeleteGroupsRequest) (_ *coordinatorv1.DeleteGroupsResponse, err error) {
	defer func() { err = grpcError(err) }()
	if err := c.check(); err != nil {
		return nil, err
	}
	resp := &coordinatorv1.DeleteGroupsResponse{}
	for _, id := range req.GetGroupIds() {
		dg := &coordinatorv1.DeletedGroup{GroupId: id}
		resp.Results = append(resp.Results, dg)
		if id == "" {
			dg.ErrorCode = codeInvalidGroupID
			continue
		}
		err := c.withGroup(ctx, id, false, func(g *group, _ time.Time) error {
			switch {
			case !g.exists:
				dg.ErrorCode = codeGroupIDNotFound
				return errSkip
			case g.State != StateEmpty || len(g.active()) > 0:
				dg.ErrorCode = codeNonEmptyGroup
				return errSkip
			}
			g.deleted = true
			g.touch()
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// OffsetDelete implements Kafka's handleDeleteOffsets (KIP-496): offsets of topics the
// group's consumers are subscribed to are kept (GROUP_SUBSCRIBED_TO_TOPIC).
func (c *Coordinator) OffsetDelete(ctx context.Context, req *coordinatorv1.OffsetDeleteRequest) (_ *coordinatorv1.OffsetDeleteResponse, err error) {
	defer func() { err = grpcError(err) }()
	if err := c.check(); err != nil {
		return nil, err
	}
	resp := &coordinatorv1.OffsetDeleteResponse{}
	if req.GetGroupId() == "" {
		resp.ErrorCode = codeInvalidGroupID
		return resp, nil
	}
	tx, err := c.pool.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		return nil, fmt.Errorf("%w: begin: %v", ErrNotReady, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	err = c.withGroupTx(ctx, tx, req.GetGroupId(), false, func(g *group, _ time.Time) error {
		if !g.exists {
			resp.ErrorCode = codeGroupIDNotFound
			return errSkip
		}
		subscribed := map[string]bool{}
		if len(g.active()) > 0 {
			if g.ProtocolType != "consumer" {
				resp.ErrorCode = codeNonEmptyGroup
				return errSkip
			}
			for _, m := range g.active() {
				for _, t := range subscribedTopics(m.metadataFor(g.Protocol)) {
					subscribed[t] = true
				}
			}
		}
		for _, t := range req.GetTopics() {
			rt := &coordinatorv1.TopicPartitionResults{Name: t.GetName()}
			resp.Topics = append(resp.Topics, rt)
			for _, p := range t.GetPartitions() {
				r := &coordinatorv1.PartitionResult{Partition: p}
				rt.Partitions = append(rt.Partitions, r)
				if subscribed[t.GetName()] {
					r.ErrorCode = codeGroupSubscribedToTopic
					continue
				}
				if _, err := tx.Exec(ctx, `DELETE FROM consumer_group_offsets WHERE group_id = $1 AND topic = $2 AND partition = $3`,
					g.ID, t.GetName(), p); err != nil {
					return fmt.Errorf("delete offset: %w", err)
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// subscribedTopics decodes the topics of a ConsumerProtocolSubscription (Kafka's
// consumer protocol metadata, any version: int16 version, then an array of int16-length
// strings). Undecodable metadata yields none.
func subscribedTopics(b []byte) []string {
	if len(b) < 6 {
		return nil
	}
	n := int32(binary.BigEndian.Uint32(b[2:6]))
	b = b[6:]
	var out []string
	for i := int32(0); i < n; i++ {
		if len(b) < 2 {
			return out
		}
		l := int(int16(binary.BigEndian.Uint16(b)))
		b = b[2:]
		if l < 0 || len(b) < l {
			return out
		}
		out = append(out, string(b[:l]))
		b = b[l:]
	}
	return out
}
