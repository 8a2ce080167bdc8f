package handler

// ConsumerGroupHeartbeat (API key 68), versions 0-1 (KIP-848).
//
// Behaviour: forwarded to the coordinator's consumer group service, which joins
// (member epoch 0), heartbeats or removes (-1; -2 for a static member) the member,
// computes the target assignment with the server-side assignor (uniform or range,
// group.consumer.assignors), and answers the member's epoch, the partitions it may own
// now (a partition is revoked from its owner before another member gets it) and the
// heartbeat interval (5 s). v0 has the coordinator make the member id; v1 takes the
// client's and adds SubscribedTopicRegex (RE2, matched against whole topic names on
// the server). Errors as Kafka 4: INVALID_REQUEST, UNKNOWN_MEMBER_ID,
// FENCED_MEMBER_EPOCH, UNRELEASED_INSTANCE_ID, FENCED_INSTANCE_ID,
// GROUP_MAX_SIZE_REACHED, UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION (v1),
// GROUP_ID_NOT_FOUND (a classic group with members). Coordinator outage:
// COORDINATOR_NOT_AVAILABLE.
//
// With the authorizer on: READ on the group, else GROUP_AUTHORIZATION_FAILED, and
// DESCRIBE on each subscribed topic name, else TOPIC_AUTHORIZATION_FAILED. Of the
// topics a regex matches, the member is assigned only those its principal may
// DESCRIBE (Kafka's filterTopicDescribeAuthorizedTopics): every heartbeat of a caller
// that is no super user carries its principal, host and allow.everyone.if.no.acl.found,
// and the coordinator decides with the ACLs it holds. Fetch still needs READ on each.
//
// KIPs: KIP-848, KIP-1082 (v1: client-side member ids).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() {
	register(kmsg.ConsumerGroupHeartbeat.Int16(), 0, 1, (*Handler).handleConsumerGroupHeartbeat)
}

func (h *Handler) handleConsumerGroupHeartbeat(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.ConsumerGroupHeartbeatRequest)
	resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
	x := h.access(ctx, r)
	if code := x.groupCall(kafkaacl.OpRead, req.Group, req.SubscribedTopicNames, h.consumers != nil); code != 0 {
		resp.ErrorCode = code
		return resp, nil
	}
	creq := &coordinatorv1.ConsumerGroupHeartbeatRequest{
		Version: int32(req.Version), GroupId: req.Group, MemberId: req.MemberID, MemberEpoch: req.MemberEpoch,
		InstanceId: req.InstanceID, RackId: req.RackID, RebalanceTimeoutMs: req.RebalanceTimeoutMillis,
		HasSubscribedTopicNames: req.SubscribedTopicNames != nil, SubscribedTopicNames: req.SubscribedTopicNames,
		SubscribedTopicRegex: req.SubscribedTopicRegex, ServerAssignor: req.ServerAssignor,
		HasTopicPartitions: req.Topics != nil, ClientHost: r.ClientHost,
	}
	if r.ClientID != nil {
		creq.ClientId = *r.ClientID
	}
	creq.RegexAuthorization = x.regexAuthorization()
	for _, t := range req.Topics {
		creq.TopicPartitions = append(creq.TopicPartitions, &coordinatorv1.TopicPartitions{TopicId: t.TopicID[:], Partitions: t.Partitions})
	}
	cctx, cancel := groupCtx(ctx, groupCallTimeout)
	defer cancel()
	out, err := h.consumers.ConsumerGroupHeartbeat(cctx, creq)
	if err != nil {
		resp.ErrorCode = h.groupCode("ConsumerGroupHeartbeat", err)
		return resp, nil
	}
	resp.ErrorCode = int16(out.GetErrorCode())
	if msg := out.GetErrorMessage(); msg != "" {
		resp.ErrorMessage = &msg
	}
	if resp.ErrorCode != 0 {
		return resp, nil
	}
	id := out.GetMemberId()
	resp.MemberID, resp.MemberEpoch, resp.HeartbeatIntervalMillis = &id, out.GetMemberEpoch(), out.GetHeartbeatIntervalMs()
	if out.GetHasAssignment() {
		a := kmsg.NewConsumerGroupHeartbeatResponseAssignment()
		for _, t := range out.GetAssignment() {
			at := kmsg.NewConsumerGroupHeartbeatResponseAssignmentTopic()
			copy(at.TopicID[:], t.GetTopicId())
			at.Partitions = t.GetPartitions()
			a.Topics = append(a.Topics, at)
		}
		resp.Assignment = &a
	}
	return resp, nil
}
