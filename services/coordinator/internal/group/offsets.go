package group

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tributary/tributary/libs/channel"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/coordinator/internal/consumergroup"
	"github.com/tributary/tributary/services/coordinator/internal/rpcerr"
	"github.com/tributary/tributary/services/coordinator/internal/store"
)

// OffsetCommit implements Kafka's handleCommitOffsets: offsets are written to Postgres
// before the answer. A commit with generation -1 and no member id comes from a client
// that does not use group management and needs the group to be Empty (a missing group
// is created Empty, as Kafka does).
func (c *Coordinator) OffsetCommit(ctx context.Context, req *coordinatorv1.OffsetCommitRequest) (_ *coordinatorv1.OffsetCommitResponse, err error) {
	defer func() { err = rpcerr.Status(err) }()
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
	tx, err := c.store.BeginGroupTx(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: begin: %v", ErrNotReady, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	err = c.withGroupTx(ctx, tx, gid, simple, func(g *group, now time.Time) error {
		code := codeNone
		switch {
		case g.Type == store.GroupTypeShare:
			// A share group keeps no committed offsets (its positions are storage-core's
			// share-partition state), as Kafka's.
			code = codeGroupIDNotFound
		case g.Type == store.GroupTypeConsumer && simple:
			if g.consumerMembers {
				code = codeUnknownMemberID
			}
		case g.Type == store.GroupTypeConsumer:
			parts := map[string][]int32{}
			for _, t := range req.GetTopics() {
				for _, p := range t.GetPartitions() {
					parts[t.GetName()] = append(parts[t.GetName()], p.GetPartition())
				}
			}
			c16, err := consumergroup.CheckCommit(g.consumerDoc, memberID, gen, parts)
			if err != nil {
				return err
			}
			code = int32(c16)
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
		var offsets []store.GroupOffset
		for _, t := range req.GetTopics() {
			rt := &coordinatorv1.TopicPartitionResults{Name: t.GetName()}
			for _, p := range t.GetPartitions() {
				r := &coordinatorv1.PartitionResult{Partition: p.GetPartition()}
				rt.Partitions = append(rt.Partitions, r)
				if len(p.GetMetadata()) > c.cfg.MaxMetadataSize {
					r.ErrorCode = codeOffsetMetadataTooLarge
					continue
				}
				offsets = append(offsets, store.GroupOffset{Topic: t.GetName(), Partition: p.GetPartition(),
					Offset: p.GetCommittedOffset(), LeaderEpoch: p.GetCommittedLeaderEpoch(), Metadata: p.GetMetadata()})
			}
			resp.Topics = append(resp.Topics, rt)
		}
		if len(offsets) > 0 {
			if err := tx.SaveGroupOffsets(ctx, gid, offsets, now); err != nil {
				return err
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

// checkFetchMember checks an OffsetFetch v9 member id and epoch against a KIP-848
// consumer group (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH, FENCED_MEMBER_EPOCH); other
// groups ignore them, as Kafka's classic groups do.
func (c *Coordinator) checkFetchMember(ctx context.Context, rg *coordinatorv1.OffsetFetchGroup) (int32, error) {
	row, doc, err := c.store.SnapshotConsumerGroup(ctx, rg.GetGroupId())
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrNotReady, err)
	}
	if row == nil || row.GroupType != store.GroupTypeConsumer {
		return codeNone, nil
	}
	if rg.GetMemberId() == "" && rg.GetMemberEpoch() < 0 {
		return codeNone, nil
	}
	code, err := consumergroup.CheckCommit(doc, rg.GetMemberId(), rg.GetMemberEpoch(), nil)
	return int32(code), err
}

// withGroupTx is withGroup's work in the caller's transaction tx: it commits tx when fn
// returns nil and leaves it for the caller to roll back otherwise (errSkip: no error).
func (c *Coordinator) withGroupTx(ctx context.Context, tx *store.GroupTx, id string, create bool, fn func(g *group, now time.Time) error) error {
	g, err := lockGroup(ctx, tx, id)
	if err != nil {
		return err
	}
	inserted := false
	if !g.exists && create {
		if err := tx.InsertEmptyGroup(ctx, id); err != nil {
			return err
		}
		if g, err = lockGroup(ctx, tx, id); err != nil {
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
	offs, err := c.store.GroupOffsets(ctx, gid, topic)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotReady, err)
	}
	out := make(map[tp]storedOffset, len(offs))
	for _, o := range offs {
		out[tp{o.Topic, o.Partition}] = storedOffset{Offset: o.Offset, Epoch: o.LeaderEpoch, Metadata: o.Metadata, Time: o.CommitTime}
	}
	return out, nil
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
	defer func() { err = rpcerr.Status(err) }()
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
		if rg.MemberId != nil {
			code, err := c.checkFetchMember(ctx, rg)
			if err != nil {
				return nil, err
			}
			if code != codeNone {
				fg.ErrorCode = code
				continue
			}
		}
		offs, err := c.readOffsets(ctx, rg.GetGroupId(), "")
		if err != nil {
			return nil, err
		}
		var unstable map[store.TxnPartition]bool
		if req.GetRequireStable() {
			if unstable, err = c.store.GroupPendingTxnOffsets(ctx, rg.GetGroupId()); err != nil {
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

// GetCommittedOffsets answers with a group's committed offsets, read-only (it never
// creates or changes the group), as channels and sequences, sorted by topic and
// partition, with each channel's lag: its high watermark (the sequence of its last
// record, from storage-core's GetChannel) minus the committed offset, at least 0, or
// -1 when the channel does not exist (or no storage-core client was given). Errors:
// INVALID_ARGUMENT (empty group or invalid topic), NOT_FOUND (the group has no state
// and no committed offsets), UNAVAILABLE (Postgres or storage-core not reachable).
func (c *Coordinator) GetCommittedOffsets(ctx context.Context, req *coordinatorv1.GetCommittedOffsetsRequest) (_ *coordinatorv1.GetCommittedOffsetsResponse, err error) {
	defer func() { err = rpcerr.Status(err) }()
	if req.GetGroup() == "" {
		return nil, status.Error(codes.InvalidArgument, "group is empty")
	}
	if t := req.GetTopic(); t != "" {
		if err := channel.ValidateKafkaTopic(t); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	g, err := snapshotGroup(ctx, c.store, req.GetGroup())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotReady, err)
	}
	if !g.exists {
		return nil, status.Errorf(codes.NotFound, "group %q has no state and no committed offsets", req.GetGroup())
	}
	offs, err := c.readOffsets(ctx, req.GetGroup(), req.GetTopic())
	if err != nil {
		return nil, err
	}
	out := &coordinatorv1.GetCommittedOffsetsResponse{Group: req.GetGroup(), State: string(g.State)}
	for _, k := range sortedKeys(offs) {
		o := offs[k]
		name := channel.KafkaPartition(k.Topic, k.Partition)
		p := &coordinatorv1.CommittedPosition{
			Channel:         name,
			Topic:           k.Topic,
			Partition:       k.Partition,
			NextSequence:    channel.OffsetToSequence(o.Offset),
			CommittedOffset: o.Offset,
			Metadata:        o.Metadata,
			CommitTimeMs:    o.Time.UnixMilli(),
			Lag:             -1,
		}
		hwm, err := c.highWatermark(ctx, name)
		if err != nil {
			return nil, err
		}
		if hwm >= 0 {
			// High watermark (sequence of the last record) minus the committed offset
			// (sequence of the last consumed record).
			p.Lag = max(hwm-o.Offset, 0)
		}
		out.Positions = append(out.Positions, p)
	}
	return out, nil
}

// highWatermark is the sequence of the last record of channel name, -1 when storage-core
// has no such channel or no storage-core client was given. Any other storage-core
// failure is UNAVAILABLE.
func (c *Coordinator) highWatermark(ctx context.Context, name string) (int64, error) {
	if c.storage == nil {
		return -1, nil
	}
	resp, err := c.storage.GetChannel(ctx, &storagev1.GetChannelRequest{Name: name})
	switch {
	case status.Code(err) == codes.NotFound:
		return -1, nil
	case err != nil:
		return 0, status.Errorf(codes.Unavailable, "storage-core: %s", status.Convert(err).Message())
	}
	return resp.GetChannel().GetHighWatermark(), nil
}

// DescribeGroups implements Kafka's handleDescribeGroup: an unknown group is Dead with
// no error; member metadata and assignments are shown only while the group is Stable.
func (c *Coordinator) DescribeGroups(ctx context.Context, req *coordinatorv1.DescribeGroupsRequest) (_ *coordinatorv1.DescribeGroupsResponse, err error) {
	defer func() { err = rpcerr.Status(err) }()
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
		g, err := snapshotGroup(ctx, c.store, id)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrNotReady, err)
		}
		if !g.exists || g.Type != store.GroupTypeClassic {
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

// ListGroups implements Kafka's handleListGroups with the KIP-518 state filter and the
// KIP-848 group-type filter (classic, consumer), both case-insensitive.
func (c *Coordinator) ListGroups(ctx context.Context, req *coordinatorv1.ListGroupsRequest) (_ *coordinatorv1.ListGroupsResponse, err error) {
	defer func() { err = rpcerr.Status(err) }()
	if err := c.check(); err != nil {
		return nil, err
	}
	groups, err := c.store.ListGroups(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotReady, err)
	}
	resp := &coordinatorv1.ListGroupsResponse{}
	for _, l := range groups {
		if matches(req.GetStatesFilter(), l.State) && matches(req.GetTypesFilter(), l.GroupType) {
			resp.Groups = append(resp.Groups, &coordinatorv1.ListedGroup{GroupId: l.ID, ProtocolType: l.ProtocolType, State: l.State, GroupType: l.GroupType})
		}
	}
	return resp, nil
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
	defer func() { err = rpcerr.Status(err) }()
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
			case g.Type == store.GroupTypeShare && c.deleteShareState != nil:
				// KIP-932: the share partitions go first, under the row lock, so
				// no member joins meanwhile; a failure keeps the group.
				if err := c.deleteShareState(ctx, id); err != nil {
					return err
				}
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
	defer func() { err = rpcerr.Status(err) }()
	if err := c.check(); err != nil {
		return nil, err
	}
	resp := &coordinatorv1.OffsetDeleteResponse{}
	if req.GetGroupId() == "" {
		resp.ErrorCode = codeInvalidGroupID
		return resp, nil
	}
	tx, err := c.store.BeginGroupTx(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: begin: %v", ErrNotReady, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	err = c.withGroupTx(ctx, tx, req.GetGroupId(), false, func(g *group, _ time.Time) error {
		if !g.exists || g.Type == store.GroupTypeShare {
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
				if err := tx.DeleteGroupOffset(ctx, g.ID, t.GetName(), p); err != nil {
					return err
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
