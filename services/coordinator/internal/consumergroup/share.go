package consumergroup

// KIP-932 share groups (Kafka 4's "share" group type, ShareGroupHeartbeat and
// ShareGroupDescribe), built on the consumer group machinery of this package: the same
// group document (members, epochs, subscribed topic metadata, target assignment) under
// the consumer_groups row lock, the same sweep. What differs: the "simple" share
// assignor may give a partition to several members (records, not partitions, are what
// share consumers divide; storage-core hands each record to one of them), so there is
// no revocation: a member takes its target assignment and the target epoch at its next
// heartbeat. A group id a classic or consumer group holds never becomes a share group,
// nor the reverse (GROUP_ID_NOT_FOUND, as Kafka, which does not convert share groups).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"go.uber.org/zap"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/coordinator/internal/rpcerr"
	"github.com/tributary/tributary/services/coordinator/internal/store"
)

// AssignorSimple is Kafka's share group assignor (group.share.assignors), the only one.
const AssignorSimple = "simple"

// Share group states as Kafka's ShareGroup names them.
const groupShareStable = "Stable"

// ShareConfig holds the broker settings of KIP-932 share groups.
type ShareConfig struct {
	// SessionTimeout is group.share.session.timeout.ms (default 45 s).
	SessionTimeout time.Duration
	// HeartbeatInterval is group.share.heartbeat.interval.ms (default 5 s).
	HeartbeatInterval time.Duration
	// MaxSize is group.share.max.size (default 200).
	MaxSize int
}

// ErrInvalidShareConfig wraps every ShareConfig.Validate failure.
var ErrInvalidShareConfig = errors.New("invalid share group config")

func (c *ShareConfig) setDefaults() {
	if c.SessionTimeout == 0 {
		c.SessionTimeout = 45 * time.Second
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = 5 * time.Second
	}
	if c.MaxSize == 0 {
		c.MaxSize = 200
	}
}

// Validate checks the settings (zero values stand for the defaults).
func (c ShareConfig) Validate() error {
	c.setDefaults()
	if c.SessionTimeout <= 0 || c.HeartbeatInterval <= 0 || c.HeartbeatInterval >= c.SessionTimeout {
		return fmt.Errorf("%w: heartbeat interval must be positive and below the session timeout", ErrInvalidShareConfig)
	}
	if c.MaxSize < 1 {
		return fmt.Errorf("%w: max size must be at least 1", ErrInvalidShareConfig)
	}
	return nil
}

// ShareCoordinator serves tributary.coordinator.v1.ShareGroupService.
type ShareCoordinator struct {
	coordinatorv1.UnimplementedShareGroupServiceServer

	cfg ShareConfig
	c   *Coordinator // its store, clock, log and topic listing
	// partitions is storage-core's ShareService (the share-partition state); nil
	// answers the offsets admin UNAVAILABLE.
	partitions storagev1.ShareServiceClient
}

// NewShare builds the share group coordinator beside consumer group coordinator c;
// partitions is storage-core's share service (nil in tests and with a raft-mode
// storage cluster, whose queues are not replicated yet).
func NewShare(cfg ShareConfig, c *Coordinator, partitions storagev1.ShareServiceClient) (*ShareCoordinator, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &ShareCoordinator{cfg: cfg, c: c, partitions: partitions}, nil
}

// shareKind stores share groups (KIP-932); no other group type becomes one.
var shareKind = docKind{
	groupType: store.GroupTypeShare,
	insert:    (*store.GroupTx).InsertEmptyShareGroup,
	load:      (*store.GroupTx).ShareGroupDoc,
	save:      (*store.GroupTx).SaveShareGroup,
	state:     shareState,
}

// shareState is Empty without members, else Stable (Kafka's ShareGroupState).
func shareState(d *doc) string {
	if len(d.Members) == 0 {
		return groupEmpty
	}
	return groupShareStable
}

// ShareGroupHeartbeat implements Kafka's ShareGroupHeartbeat (KIP-932).
func (s *ShareCoordinator) ShareGroupHeartbeat(ctx context.Context, req *coordinatorv1.ShareGroupHeartbeatRequest) (*coordinatorv1.ShareGroupHeartbeatResponse, error) {
	resp := &coordinatorv1.ShareGroupHeartbeatResponse{}
	answer := func(o outcome, d *doc) *coordinatorv1.ShareGroupHeartbeatResponse {
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
	if o := validateShare(req); o != nil {
		return answer(*o, nil), nil
	}
	topics, err := s.c.topics(ctx)
	if err != nil {
		return nil, rpcerr.Status(err)
	}
	id := req.GetGroupId()
	session, interval, err := s.timeouts(ctx, id)
	if err != nil {
		return nil, rpcerr.Status(err)
	}
	resp.HeartbeatIntervalMs = int32(interval / time.Millisecond)
	var out *coordinatorv1.ShareGroupHeartbeatResponse
	err = s.c.lockDoc(ctx, shareKind, id, req.GetMemberEpoch() == epochJoin, func(d *doc, now time.Time) (bool, error) {
		if d == nil {
			out = answer(fail(kerr.GroupIDNotFound, "Group %s is not a share group.", id), nil)
			return false, nil
		}
		o, changed := s.heartbeat(d, req, topics, now, session)
		out = answer(o, d)
		if ce := s.c.log.Check(zap.DebugLevel, "share group heartbeat"); ce != nil {
			fields := []zap.Field{zap.String("group", id), zap.String("member", req.GetMemberId()),
				zap.Int32("request_epoch", req.GetMemberEpoch()), zap.Int16("error_code", o.code),
				zap.Int32("group_epoch", d.GroupEpoch), zap.Int32("assignment_epoch", d.AssignmentEpoch)}
			if o.member != nil {
				fields = append(fields, zap.Int32("epoch", o.epoch), zap.Any("assigned", o.member.Assigned), zap.Bool("sent", o.sendAll))
			}
			ce.Write(fields...)
		}
		return changed && o.code == 0, nil
	})
	if err != nil {
		return nil, rpcerr.Status(err)
	}
	if req.GetMemberEpoch() == epochLeave && out.GetErrorCode() == 0 {
		s.release(ctx, id, []string{req.GetMemberId()})
	}
	return out, nil
}

// release hands back to the group the records members acquired (storage-core's
// ReleaseMember over all the group's partitions), once they left or their session
// ended, as Kafka releases a departed member's acquisitions. Best effort: a failure is
// logged, and the acquisition locks expire anyway.
func (s *ShareCoordinator) release(ctx context.Context, group string, members []string) {
	if s.partitions == nil {
		return
	}
	for _, m := range members {
		cctx, cancel := context.WithTimeout(ctx, shareStorageTimeout)
		out, err := s.partitions.ReleaseMember(cctx, &storagev1.ReleaseMemberRequest{GroupId: group, MemberId: m})
		cancel()
		if err != nil {
			s.c.log.Warn("release share group member's records failed", zap.String("group", group), zap.String("member", m), zap.Error(err))
			continue
		}
		if out.GetReleased() > 0 {
			s.c.log.Info("released share group member's records", zap.String("group", group), zap.String("member", m), zap.Int64("records", out.GetReleased()))
		}
	}
}

// validateShare checks a heartbeat as Kafka's throwIfShareGroupHeartbeatRequestIsInvalid
// does: every failure is INVALID_REQUEST. A blank string counts as empty.
func validateShare(req *coordinatorv1.ShareGroupHeartbeatRequest) *outcome {
	bad := func(msg string) *outcome {
		o := fail(kerr.InvalidRequest, "%s", msg)
		return &o
	}
	switch e := req.GetMemberEpoch(); {
	case strings.TrimSpace(req.GetMemberId()) == "":
		return bad("MemberId can't be empty.")
	case strings.TrimSpace(req.GetGroupId()) == "":
		return bad("GroupId can't be empty.")
	case req.RackId != nil && strings.TrimSpace(req.GetRackId()) == "":
		return bad("RackId can't be empty.")
	case e == epochJoin && len(req.GetSubscribedTopicNames()) == 0:
		return bad("SubscribedTopicNames must be set in first request.")
	case e < epochLeave:
		return bad("MemberEpoch is invalid.")
	}
	return nil
}

// timeouts are group id's session timeout and heartbeat interval: its
// share.session.timeout.ms and share.heartbeat.interval.ms group configs when set,
// else the broker's (--group-share-session-timeout, --group-share-heartbeat-interval).
func (s *ShareCoordinator) timeouts(ctx context.Context, id string) (time.Duration, time.Duration, error) {
	set, err := s.c.store.GroupConfigs(ctx, id)
	if err != nil {
		return 0, 0, err
	}
	session, interval := s.cfg.SessionTimeout, s.cfg.HeartbeatInterval
	if ms, err := strconv.Atoi(set[ConfigShareSessionTimeout]); err == nil && ms > 0 {
		session = time.Duration(ms) * time.Millisecond
	}
	if ms, err := strconv.Atoi(set[ConfigShareHeartbeatInterval]); err == nil && ms > 0 {
		interval = time.Duration(ms) * time.Millisecond
	}
	return session, interval, nil
}

// heartbeat applies one valid heartbeat to share group d (Kafka's shareGroupHeartbeat)
// with session timeout session, and reports whether d changed (a successful heartbeat
// always does: it extends the member's session).
func (s *ShareCoordinator) heartbeat(d *doc, req *coordinatorv1.ShareGroupHeartbeatRequest, topics []topicInfo, now time.Time, session time.Duration) (outcome, bool) {
	id, e := req.GetMemberId(), req.GetMemberEpoch()
	m := d.Members[id]
	if e == epochLeave {
		if m == nil {
			return fail(kerr.UnknownMemberID, "Member %s is not a member of group %s.", id, req.GetGroupId()), false
		}
		s.remove(d, id, topics)
		return outcome{member: m, epoch: epochLeave}, true
	}
	bump := false
	switch {
	case m == nil && e != epochJoin:
		return fail(kerr.UnknownMemberID, "Member %s is not a member of group %s.", id, req.GetGroupId()), false
	case m == nil:
		if len(d.Members) >= s.cfg.MaxSize {
			return fail(kerr.GroupMaxSizeReached, "The share group has reached its maximum capacity of %d members.", s.cfg.MaxSize), false
		}
		m = &member{ID: id, Assigned: assignment{}}
		d.Members[id] = m
		bump = true
	case e == epochJoin:
		// The member joins again under its id (its last answer was lost, or it was
		// fenced): it keeps its place.
	case e != m.Epoch && e != m.PrevEpoch:
		// Kafka's throwIfShareGroupMemberEpochIsInvalid: the current epoch, or the
		// previous one when the answer that moved it on was lost.
		return fail(kerr.FencedMemberEpoch, "The share group member has a %s member epoch (%d) than the one known by the group coordinator (%d). The member must abandon all its partitions and rejoin.",
			map[bool]string{true: "greater", false: "smaller"}[e > m.Epoch], e, m.Epoch), false
	}
	if req.RackId != nil {
		v := req.GetRackId()
		m.RackID = &v
	}
	m.ClientID, m.ClientHost = req.GetClientId(), req.GetClientHost()
	if req.GetHasSubscribedTopicNames() {
		names := slices.Clone(req.GetSubscribedTopicNames())
		sort.Strings(names)
		names = slices.Compact(names)
		if !slices.Equal(names, m.Topics) {
			m.Topics, bump = names, true
		}
	}
	m.SessionDeadline = now.Add(session)
	if s.c.refreshTopics(d, topics) {
		bump = true
	}
	if bump {
		d.GroupEpoch++
	}
	s.maybeAssign(d)
	before := m.Assigned
	// No revocation in share groups: the member takes its target at once.
	if m.Epoch != d.AssignmentEpoch {
		m.PrevEpoch, m.Epoch = m.Epoch, d.AssignmentEpoch
	}
	m.Assigned = d.Target[id].clone()
	changed := !m.Assigned.equal(before)
	return outcome{member: m, epoch: m.Epoch, sendAll: e == epochJoin || req.GetHasSubscribedTopicNames() || changed}, true
}

// remove takes member id out of share group d and computes the new target assignment.
func (s *ShareCoordinator) remove(d *doc, id string, topics []topicInfo) {
	delete(d.Members, id)
	delete(d.Target, id)
	s.c.refreshTopics(d, topics)
	d.GroupEpoch++
	s.maybeAssign(d)
}

// maybeAssign computes a new target assignment with the simple assignor when the group
// epoch moved past it.
func (s *ShareCoordinator) maybeAssign(d *doc) {
	if d.GroupEpoch <= d.AssignmentEpoch {
		return
	}
	spec := assignorSpec{subs: map[string][]string{}, partitions: map[string]int32{}, current: d.Target}
	for _, t := range d.Topics {
		spec.partitions[t.ID] = t.Partitions
	}
	for id, m := range d.Members {
		var ids []string
		for _, name := range m.Topics {
			if t, ok := d.Topics[name]; ok {
				ids = append(ids, t.ID)
			}
		}
		spec.subs[id] = ids
	}
	d.Target = assignSimple(spec)
	d.AssignmentEpoch = d.GroupEpoch
}

// expire removes the members whose session ended; it returns their ids.
func (s *ShareCoordinator) expire(d *doc, topics []topicInfo, now time.Time) []string {
	var gone []string
	for id, m := range d.Members {
		if !m.SessionDeadline.After(now) {
			gone = append(gone, id)
		}
	}
	sort.Strings(gone)
	for _, id := range gone {
		s.remove(d, id, topics)
	}
	return gone
}

// Sweep removes share group members whose session timed out and moves every group it
// touches to a new target assignment. The group coordinator runs it under its NATS
// sweep lock, beside the consumer group sweep.
func (s *ShareCoordinator) Sweep(ctx context.Context, now time.Time) error {
	gone := map[string][]string{}
	err := s.c.sweep(ctx, now, shareKind, s.c.store.DueShareGroups, func(id string, d *doc, topics []topicInfo, now time.Time) []string {
		ids := s.expire(d, topics, now)
		gone[id] = ids
		return ids
	})
	// After the removals committed (a group whose commit failed keeps its members,
	// and their records come back to them at worst as expired locks do).
	for g, ms := range gone {
		s.release(ctx, g, ms)
	}
	return err
}

// DescribeShareGroups implements Kafka's ShareGroupDescribe.
func (s *ShareCoordinator) DescribeShareGroups(ctx context.Context, req *coordinatorv1.DescribeShareGroupsRequest) (*coordinatorv1.DescribeShareGroupsResponse, error) {
	resp := &coordinatorv1.DescribeShareGroupsResponse{}
	for _, id := range req.GetGroupIds() {
		g := &coordinatorv1.ShareGroupDescription{GroupId: id}
		resp.Groups = append(resp.Groups, g)
		if id == "" {
			g.ErrorCode, g.ErrorMessage = int32(kerr.InvalidGroupID.Code), "GroupId can't be empty."
			continue
		}
		row, raw, err := s.c.store.SnapshotShareGroup(ctx, id)
		if err != nil {
			return nil, rpcerr.Status(err)
		}
		switch {
		case row == nil:
			g.ErrorCode, g.ErrorMessage = int32(kerr.GroupIDNotFound.Code), fmt.Sprintf("Group %s not found.", id)
			continue
		case row.GroupType != store.GroupTypeShare:
			g.ErrorCode, g.ErrorMessage = int32(kerr.GroupIDNotFound.Code), fmt.Sprintf("Group %s is not a share group.", id)
			continue
		}
		d, err := decodeDoc(raw)
		if err != nil {
			return nil, rpcerr.Status(err)
		}
		g.State, g.GroupEpoch, g.AssignmentEpoch, g.AssignorName = shareState(d), d.GroupEpoch, d.AssignmentEpoch, AssignorSimple
		names := d.topicNames()
		for _, m := range sortedMembers(d) {
			topics := m.Topics
			if topics == nil {
				topics = []string{}
			}
			g.Members = append(g.Members, &coordinatorv1.ShareGroupMemberDescription{
				MemberId: m.ID, RackId: m.RackID, MemberEpoch: m.Epoch, ClientId: m.ClientID, ClientHost: m.ClientHost,
				SubscribedTopicNames: topics, Assignment: toTopicPartitions(m.Assigned, names),
			})
		}
	}
	return resp, nil
}
