// Package consumergroup is the KIP-848 consumer group coordinator (Kafka 4's
// "consumer" group type, ConsumerGroupHeartbeat and ConsumerGroupDescribe): the
// coordinator assigns partitions with a server-side assignor (uniform, range), members
// carry member epochs, and each member reconciles toward the target assignment
// through its heartbeats; a partition leaves its owner (who acknowledges by
// heartbeating without it) before another member gets it.
//
// State lives in Postgres: a consumer group is a consumer_groups row of type
// "consumer" (one id namespace, one row lock and one committed-offset store with the
// classic groups of internal/group) and one JSON document of members, epochs and
// target assignment. Every heartbeat is one transaction under the row lock, so any
// coordinator replica serves any group. Member sessions and revocation timeouts are
// swept by Sweep, which the group coordinator runs under its NATS sweep lock.
//
// The member/epoch/sweep machinery is kept apart from the classic protocol so that
// KIP-932 share groups can reuse it.
package consumergroup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"go.uber.org/zap"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	"github.com/tributary/tributary/services/coordinator/internal/rpcerr"
	"github.com/tributary/tributary/services/coordinator/internal/store"
)

// Config holds the broker settings of KIP-848 groups.
type Config struct {
	// SessionTimeout is group.consumer.session.timeout.ms (default 45 s).
	SessionTimeout time.Duration
	// HeartbeatInterval is group.consumer.heartbeat.interval.ms (default 5 s).
	HeartbeatInterval time.Duration
	// Assignors is group.consumer.assignors; the first is the default (default
	// uniform, range).
	Assignors []string
	// MaxSize is group.consumer.max.size (0: no limit).
	MaxSize int
	// ClusterID is the --cluster-id: it names the ids of Kafka's internal topics
	// (channel.KafkaInternalTopicID), which subscriptions may match as in Kafka.
	ClusterID string
}

// ErrInvalidConfig wraps every Config.Validate failure.
var ErrInvalidConfig = errors.New("invalid consumer group config")

func (c *Config) setDefaults() {
	if c.SessionTimeout == 0 {
		c.SessionTimeout = 45 * time.Second
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = 5 * time.Second
	}
	if len(c.Assignors) == 0 {
		c.Assignors = []string{AssignorUniform, AssignorRange}
	}
}

// Validate checks the settings (zero values stand for the defaults).
func (c Config) Validate() error {
	c.setDefaults()
	if c.SessionTimeout <= 0 || c.HeartbeatInterval <= 0 || c.HeartbeatInterval >= c.SessionTimeout {
		return fmt.Errorf("%w: heartbeat interval must be positive and below the session timeout", ErrInvalidConfig)
	}
	for _, a := range c.Assignors {
		if a != AssignorUniform && a != AssignorRange {
			return fmt.Errorf("%w: unknown assignor %q (uniform, range)", ErrInvalidConfig, a)
		}
	}
	return nil
}

// Coordinator serves tributary.coordinator.v1.ConsumerGroupService.
type Coordinator struct {
	coordinatorv1.UnimplementedConsumerGroupServiceServer

	cfg     Config
	store   *store.Store
	log     *zap.Logger
	now     func() time.Time
	regexes sync.Map // regex source -> *regexp.Regexp

	aclMu     sync.Mutex // one ACL load at a time; guards aclSet and aclLoaded
	aclSet    *kafkaacl.Set
	aclLoaded time.Time
}

// aclMaxAge bounds how old the Kafka ACLs a regex subscription is authorized with
// may be; InvalidateAcls drops them sooner after a change made through this replica.
const aclMaxAge = time.Second

// New builds a Coordinator over st (migrated). now is the clock (time.Now when nil).
func New(cfg Config, st *store.Store, log *zap.Logger, now func() time.Time) (*Coordinator, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	if now == nil {
		now = time.Now
	}
	return &Coordinator{cfg: cfg, store: st, log: log, now: now}, nil
}

// ConsumerGroupHeartbeat implements Kafka's ConsumerGroupHeartbeat (KIP-848).
func (c *Coordinator) ConsumerGroupHeartbeat(ctx context.Context, req *coordinatorv1.ConsumerGroupHeartbeatRequest) (*coordinatorv1.ConsumerGroupHeartbeatResponse, error) {
	resp := &coordinatorv1.ConsumerGroupHeartbeatResponse{HeartbeatIntervalMs: int32(c.cfg.HeartbeatInterval / time.Millisecond)}
	answer := func(o outcome, d *doc) *coordinatorv1.ConsumerGroupHeartbeatResponse {
		resp.ErrorCode, resp.ErrorMessage = int32(o.code), o.msg
		if o.code != 0 {
			return resp
		}
		resp.MemberId, resp.MemberEpoch = o.member.ID, o.epoch
		if o.sendAll {
			resp.HasAssignment = true
			resp.Assignment = toTopicPartitions(o.member.Assigned, d.topicNames())
		}
		return resp
	}
	if o := c.validate(req); o != nil {
		return answer(*o, nil), nil
	}
	if req.GetVersion() == 0 && req.GetMemberEpoch() == epochJoin && req.GetMemberId() == "" {
		req.MemberId = newMemberID()
	}
	topics, err := c.topics(ctx)
	if err != nil {
		return nil, rpcerr.Status(err)
	}
	var acls *kafkaacl.Set
	if req.GetRegexAuthorization() != nil {
		if acls, err = c.acls(ctx); err != nil {
			return nil, rpcerr.Status(err)
		}
	}
	id := req.GetGroupId()
	var out *coordinatorv1.ConsumerGroupHeartbeatResponse
	err = c.withDoc(ctx, id, req.GetMemberEpoch() == epochJoin, func(d *doc, now time.Time) (bool, error) {
		if d == nil {
			out = answer(fail(kerr.GroupIDNotFound, "Group %s is not a consumer group.", id), nil)
			return false, nil
		}
		o, changed := c.heartbeat(d, req, topics, acls, now)
		out = answer(o, d)
		if ce := c.log.Check(zap.DebugLevel, "consumer group heartbeat"); ce != nil {
			fields := []zap.Field{zap.String("group", id), zap.String("member", req.GetMemberId()),
				zap.Int32("request_epoch", req.GetMemberEpoch()), zap.Int16("error_code", o.code),
				zap.Int32("group_epoch", d.GroupEpoch), zap.Int32("assignment_epoch", d.AssignmentEpoch)}
			if req.GetHasTopicPartitions() {
				fields = append(fields, zap.Any("owned", owned(req)))
			}
			if o.member != nil {
				fields = append(fields, zap.Int32("epoch", o.epoch), zap.String("state", o.member.State),
					zap.Any("assigned", o.member.Assigned), zap.Any("revoking", o.member.Revoking), zap.Bool("sent", o.sendAll))
			}
			ce.Write(fields...)
		}
		return changed && o.code == 0, nil
	})
	if err != nil {
		return nil, rpcerr.Status(err)
	}
	return out, nil
}

// withDoc runs fn on consumer group id's document under the group row lock and saves
// it when fn reports a change. fn gets a nil doc when id is missing (and create is
// false), is a share group, or is a classic group that cannot convert: an empty
// classic group becomes a consumer group when create is set (KIP-848 online upgrade),
// keeping its offsets.
func (c *Coordinator) withDoc(ctx context.Context, id string, create bool, fn func(d *doc, now time.Time) (bool, error)) error {
	return c.lockDoc(ctx, consumerKind, id, create, fn)
}

// consumerKind stores consumer groups (KIP-848).
var consumerKind = docKind{
	groupType: store.GroupTypeConsumer,
	insert:    (*store.GroupTx).InsertEmptyGroup,
	load:      (*store.GroupTx).ConsumerGroupDoc,
	save:      (*store.GroupTx).SaveConsumerGroup,
	state:     (*doc).state,
	adopt: func(row *store.Group, classic []store.GroupMember) bool {
		return row.GroupType == store.GroupTypeClassic && row.State == groupEmpty && len(classic) == 0
	},
	converted: "classic group converted to a consumer group",
}

// docKind is what differs between the group types whose state is one document under
// the consumer_groups row lock (consumer and share groups).
type docKind struct {
	groupType string
	// insert creates the group row unless it exists; load reads the document.
	insert func(*store.GroupTx, context.Context, string) error
	load   func(*store.GroupTx, context.Context, string) ([]byte, error)
	save   func(t *store.GroupTx, ctx context.Context, id, state string, doc []byte, nextDeadline, emptySince time.Time) error
	state  func(*doc) string
	// adopt reports whether a group of another type becomes one of this kind on a join
	// (nil: never); converted is logged when it does.
	adopt     func(row *store.Group, classic []store.GroupMember) bool
	converted string
}

// lockDoc runs fn on the document of group id of kind k under the group row lock and
// saves it when fn reports a change. With create, a missing group is created (fn gets
// a new document); fn gets a nil doc when the group is missing or of another type that
// k does not adopt.
func (c *Coordinator) lockDoc(ctx context.Context, k docKind, id string, create bool, fn func(d *doc, now time.Time) (bool, error)) error {
	tx, err := c.store.BeginGroupTx(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	row, classic, err := tx.LockGroup(ctx, id)
	if err != nil {
		return err
	}
	inserted := false
	if row == nil && create {
		inserted = true
		// Another replica may create the group between the read and the insert: the
		// insert then waits for it and does nothing, and the locking read sees its row.
		if err := k.insert(tx, ctx, id); err != nil {
			return err
		}
		if row, classic, err = tx.LockGroup(ctx, id); err != nil {
			return err
		}
	}
	var d *doc
	switch {
	case row == nil:
	case row.GroupType == k.groupType:
		raw, err := k.load(tx, ctx, id)
		if err != nil {
			return err
		}
		if d, err = decodeDoc(raw); err != nil {
			return err
		}
	case create && k.adopt != nil && k.adopt(row, classic):
		d = newDoc()
		if !inserted {
			c.log.Info(k.converted, zap.String("group", id))
		}
	}
	now := c.now()
	changed, err := fn(d, now)
	if err != nil || !changed {
		return err
	}
	raw, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("encode %s group: %w", k.groupType, err)
	}
	var emptySince time.Time
	if len(d.Members) == 0 {
		emptySince = now
		if row != nil && row.GroupType == k.groupType && !row.EmptySince.IsZero() {
			emptySince = row.EmptySince
		}
	}
	if err := k.save(tx, ctx, id, k.state(d), raw, d.nextDeadline(), emptySince); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func decodeDoc(raw []byte) (*doc, error) {
	d := newDoc()
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, d); err != nil {
			return nil, fmt.Errorf("decode consumer group: %w", err)
		}
	}
	if d.Members == nil {
		d.Members = map[string]*member{}
	}
	if d.Target == nil {
		d.Target = map[string]assignment{}
	}
	if d.Topics == nil {
		d.Topics = map[string]topicMeta{}
	}
	return d, nil
}

// acls returns the Kafka ACLs (AclService's bindings in Postgres), loaded again when
// older than aclMaxAge or invalidated.
func (c *Coordinator) acls(ctx context.Context) (*kafkaacl.Set, error) {
	c.aclMu.Lock()
	defer c.aclMu.Unlock()
	now := time.Now()
	if c.aclSet != nil && now.Sub(c.aclLoaded) < aclMaxAge {
		return c.aclSet, nil
	}
	bs, err := c.store.Acls(ctx)
	if err != nil {
		return nil, err
	}
	c.aclSet, c.aclLoaded = kafkaacl.NewSet(bs), now
	return c.aclSet, nil
}

// InvalidateAcls makes the next regex authorization load the ACLs again (called
// after a CreateAcls or DeleteAcls through this replica).
func (c *Coordinator) InvalidateAcls() {
	c.aclMu.Lock()
	c.aclSet = nil
	c.aclMu.Unlock()
}

// topics lists the registered topics and Kafka's internal topics.
func (c *Coordinator) topics(ctx context.Context) ([]topicInfo, error) {
	all, err := c.store.AllTopics(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]topicInfo, 0, len(all)+len(channel.KafkaInternalTopics))
	for _, t := range all {
		out = append(out, topicInfo{Name: t.Name, ID: idHex(t.ID), Partitions: t.Partitions})
	}
	for _, t := range channel.KafkaInternalTopics {
		out = append(out, topicInfo{Name: t.Name, ID: idHex(channel.KafkaInternalTopicID(c.cfg.ClusterID, t.Name)), Partitions: t.Partitions})
	}
	return out, nil
}

// Sweep removes members whose session timed out and fences members that did not
// revoke partitions within their rebalance timeout, and moves every group it touches
// to a new target assignment. The group coordinator runs it under its NATS sweep lock.
func (c *Coordinator) Sweep(ctx context.Context, now time.Time) error {
	return c.sweep(ctx, now, consumerKind, c.store.DueConsumerGroups, func(_ string, d *doc, topics []topicInfo, now time.Time) []string {
		return c.expire(d, topics, now)
	})
}

// sweep runs expire on every group of kind k that due names, each under its row lock.
func (c *Coordinator) sweep(ctx context.Context, now time.Time, k docKind, due func(context.Context, time.Time) ([]string, error),
	expire func(id string, d *doc, topics []topicInfo, now time.Time) []string) error {
	ids, err := due(ctx, now)
	if err != nil || len(ids) == 0 {
		return err
	}
	topics, err := c.topics(ctx)
	if err != nil {
		return err
	}
	for _, id := range ids {
		err := c.lockDoc(ctx, k, id, false, func(d *doc, now time.Time) (bool, error) {
			if d == nil {
				return false, nil
			}
			gone := expire(id, d, topics, now)
			for _, m := range gone {
				c.log.Info("group member expired", zap.String("group_type", k.groupType), zap.String("group", id),
					zap.String("member", m), zap.Int32("group_epoch", d.GroupEpoch))
			}
			return len(gone) > 0, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// DescribeConsumerGroups implements Kafka's ConsumerGroupDescribe.
func (c *Coordinator) DescribeConsumerGroups(ctx context.Context, req *coordinatorv1.DescribeConsumerGroupsRequest) (*coordinatorv1.DescribeConsumerGroupsResponse, error) {
	resp := &coordinatorv1.DescribeConsumerGroupsResponse{}
	for _, id := range req.GetGroupIds() {
		row, raw, err := c.store.SnapshotConsumerGroup(ctx, id)
		if err != nil {
			return nil, rpcerr.Status(err)
		}
		g := &coordinatorv1.ConsumerGroupDescription{GroupId: id}
		resp.Groups = append(resp.Groups, g)
		switch {
		case id == "":
			g.ErrorCode, g.ErrorMessage = int32(kerr.InvalidGroupID.Code), "GroupId can't be empty."
			continue
		case row == nil:
			g.ErrorCode, g.ErrorMessage = int32(kerr.GroupIDNotFound.Code), fmt.Sprintf("Group %s not found.", id)
			continue
		case row.GroupType != store.GroupTypeConsumer:
			g.ErrorCode, g.ErrorMessage = int32(kerr.GroupIDNotFound.Code), fmt.Sprintf("Group %s is not a consumer group.", id)
			continue
		}
		d, err := decodeDoc(raw)
		if err != nil {
			return nil, rpcerr.Status(err)
		}
		g.State, g.GroupEpoch, g.AssignmentEpoch = d.state(), d.GroupEpoch, d.AssignmentEpoch
		g.AssignorName = d.Assignor
		if g.AssignorName == "" {
			g.AssignorName = c.cfg.Assignors[0]
		}
		names := d.topicNames()
		for _, m := range sortedMembers(d) {
			md := &coordinatorv1.ConsumerGroupMemberDescription{
				MemberId: m.ID, InstanceId: m.InstanceID, RackId: m.RackID, MemberEpoch: m.Epoch,
				ClientId: m.ClientID, ClientHost: m.ClientHost, SubscribedTopicNames: m.Topics,
				Assignment: toTopicPartitions(m.Assigned, names), TargetAssignment: toTopicPartitions(d.Target[m.ID], names),
			}
			if m.Regex != "" {
				re := m.Regex
				md.SubscribedTopicRegex = &re
			}
			g.Members = append(g.Members, md)
		}
	}
	return resp, nil
}

// CheckCommit checks an OffsetCommit (v9+) or OffsetFetch (v9+) by member id at epoch
// against consumer group document raw (KIP-848): it answers 0, UNKNOWN_MEMBER_ID,
// FENCED_MEMBER_EPOCH (a newer epoch than the member's) or STALE_MEMBER_EPOCH (an
// older one). A commit at the member's previous epoch is accepted when every partition
// it commits (topics, by name; nil for a fetch) is still assigned to the member: its
// heartbeat answer moved the epoch on while the commit was in flight, and the
// partitions are still its own.
func CheckCommit(raw []byte, id string, epoch int32, topics map[string][]int32) (int16, error) {
	d, err := decodeDoc(raw)
	if err != nil {
		return 0, err
	}
	m := d.Members[id]
	switch {
	case m == nil:
		return kerr.UnknownMemberID.Code, nil
	case epoch > m.Epoch:
		return kerr.FencedMemberEpoch.Code, nil
	case epoch < m.Epoch:
		if topics == nil || epoch <= 0 || epoch != m.PrevEpoch {
			return kerr.StaleMemberEpoch.Code, nil
		}
		for name, ps := range topics {
			t, ok := d.Topics[name]
			if !ok {
				return kerr.StaleMemberEpoch.Code, nil
			}
			for _, p := range ps {
				if !m.Assigned.contains(t.ID, p) {
					return kerr.StaleMemberEpoch.Code, nil
				}
			}
		}
	}
	return 0, nil
}

// HasMembers reports whether consumer group document raw has members.
func HasMembers(raw []byte) (bool, error) {
	d, err := decodeDoc(raw)
	if err != nil {
		return false, err
	}
	return len(d.Members) > 0, nil
}

func sortedMembers(d *doc) []*member {
	out := make([]*member, 0, len(d.Members))
	for _, m := range d.Members {
		out = append(out, m)
	}
	slicesSortFunc(out)
	return out
}

func toTopicPartitions(a assignment, names map[string]string) []*coordinatorv1.TopicPartitions {
	out := []*coordinatorv1.TopicPartitions{}
	for _, t := range sortedKeys(a) {
		if len(a[t]) == 0 {
			continue
		}
		out = append(out, &coordinatorv1.TopicPartitions{TopicId: idBytes(t), TopicName: names[t], Partitions: a[t]})
	}
	return out
}
