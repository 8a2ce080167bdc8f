package handler

// ShareGroupHeartbeat (API key 76), version 1 (KIP-932; v0 was Kafka 4.0's early
// access, never advertised by a released broker).
//
// Behaviour: forwarded to the coordinator's share group service, which joins (member
// epoch 0, SubscribedTopicNames required), heartbeats or removes (-1) the member,
// computes the target assignment with the "simple" share assignor (a partition goes to
// several members when there are more members than partitions) and answers the
// member's epoch, its assignment (on a join, a full request or a change) and the
// heartbeat interval (group.share.heartbeat.interval.ms, 5 s). The member id is the
// client's own. Errors as Kafka 4.2: INVALID_REQUEST (empty member or group id, blank
// rack, a join without topics, an epoch below -1; a group id of any length is
// served, as Kafka sets no bound: channel.KafkaShareGroupKey names its share
// partitions), UNKNOWN_MEMBER_ID,
// FENCED_MEMBER_EPOCH (neither the member's epoch nor the one before),
// GROUP_MAX_SIZE_REACHED (group.share.max.size), GROUP_ID_NOT_FOUND (a missing group
// on a heartbeat, or an id a classic or consumer group holds). Coordinator outage:
// COORDINATOR_NOT_AVAILABLE. Not served when group.share.enable is off.
//
// With the authorizer on: READ on the group, else GROUP_AUTHORIZATION_FAILED, and
// DESCRIBE on each subscribed topic, else TOPIC_AUTHORIZATION_FAILED.
//
// KIPs: KIP-932.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() {
	register(kmsg.ShareGroupHeartbeat.Int16(), 1, 1, (*Handler).handleShareGroupHeartbeat)
}

func (h *Handler) handleShareGroupHeartbeat(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.ShareGroupHeartbeatRequest)
	resp := req.ResponseKind().(*kmsg.ShareGroupHeartbeatResponse)
	x := h.access(ctx, r)
	if code := x.groupCall(kafkaacl.OpRead, req.GroupID, req.SubscribedTopicNames, h.shares != nil); code != 0 {
		resp.ErrorCode = code
		return resp, nil
	}
	creq := &coordinatorv1.ShareGroupHeartbeatRequest{
		GroupId: req.GroupID, MemberId: req.MemberID, MemberEpoch: req.MemberEpoch, RackId: req.RackID,
		HasSubscribedTopicNames: req.SubscribedTopicNames != nil, SubscribedTopicNames: req.SubscribedTopicNames,
		ClientHost: r.ClientHost,
	}
	if r.ClientID != nil {
		creq.ClientId = *r.ClientID
	}
	cctx, cancel := groupCtx(ctx, groupCallTimeout)
	defer cancel()
	out, err := h.shares.ShareGroupHeartbeat(cctx, creq)
	if err != nil {
		resp.ErrorCode = h.groupCode("ShareGroupHeartbeat", err)
		return resp, nil
	}
	resp.ErrorCode = int16(out.GetErrorCode())
	if msg := out.GetErrorMessage(); msg != "" {
		resp.ErrorMessage = &msg
	}
	// What ShareFetch trusts (share_members.go): a member is in the group after a
	// heartbeat that succeeded, out of it after leaving or being unknown.
	switch {
	case resp.ErrorCode == kerr.UnknownMemberID.Code, resp.ErrorCode == 0 && req.MemberEpoch == -1:
		h.members.left(req.GroupID, req.MemberID)
	case resp.ErrorCode == 0:
		h.members.joined(req.GroupID, out.GetMemberId())
	}
	if resp.ErrorCode != 0 {
		return resp, nil
	}
	id := out.GetMemberId()
	resp.MemberID, resp.MemberEpoch, resp.HeartbeatIntervalMillis = &id, out.GetMemberEpoch(), out.GetHeartbeatIntervalMs()
	if out.GetHasAssignment() {
		a := kmsg.NewShareGroupHeartbeatResponseAssignment()
		for _, t := range out.GetAssignment() {
			at := kmsg.NewShareGroupHeartbeatResponseAssignmentTopicPartition()
			copy(at.TopicID[:], t.GetTopicId())
			at.Partitions = t.GetPartitions()
			a.TopicPartitions = append(a.TopicPartitions, at)
		}
		resp.Assignment = &a
	}
	return resp, nil
}
