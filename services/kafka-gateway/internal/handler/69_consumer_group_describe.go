package handler

// ConsumerGroupDescribe (API key 69), versions 0-1 (KIP-848).
//
// Behaviour: each group's state (Empty, Assigning, Reconciling, Stable), group epoch,
// target assignment epoch, assignor and members (epochs, subscriptions, current and
// target assignments with topic ids and names) from the coordinator. A missing group,
// or one of another type (classic), is GROUP_ID_NOT_FOUND; an empty id is
// INVALID_GROUP_ID. v1 adds the member type: always 1 (consumer protocol), since
// classic members never join a consumer group here. Coordinator outage:
// COORDINATOR_NOT_AVAILABLE per group.
//
// With the authorizer on: DESCRIBE on each group, else GROUP_AUTHORIZATION_FAILED for
// it, and authorized operations filled when asked (else INT32_MIN).
//
// KIPs: KIP-848, KIP-1099 (v1 member type).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() {
	register(kmsg.ConsumerGroupDescribe.Int16(), 0, 1, (*Handler).handleConsumerGroupDescribe)
}

// memberTypeConsumer is ConsumerGroupDescribe v1's member type of a member using the
// consumer (KIP-848) protocol.
const memberTypeConsumer = 1

func (h *Handler) handleConsumerGroupDescribe(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.ConsumerGroupDescribeRequest)
	resp := req.ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
	x := h.access(ctx, r)
	byID, code := describeGroups(ctx, h, "ConsumerGroupDescribe", x.groups(kafkaacl.OpDescribe, req.Groups), h.consumers != nil,
		func(ctx context.Context, ids []string) ([]*coordinatorv1.ConsumerGroupDescription, error) {
			out, err := h.consumers.DescribeConsumerGroups(ctx, &coordinatorv1.DescribeConsumerGroupsRequest{GroupIds: ids})
			return out.GetGroups(), err
		})
	for _, id := range req.Groups {
		rg := kmsg.NewConsumerGroupDescribeResponseGroup()
		rg.Group = id
		g, ok := byID[id]
		switch {
		case !x.group(kafkaacl.OpDescribe, id):
			rg.ErrorCode = kerr.GroupAuthorizationFailed.Code
		case !ok:
			rg.ErrorCode = code
		case g.GetErrorCode() != 0:
			rg.ErrorCode = int16(g.GetErrorCode())
			msg := g.GetErrorMessage()
			rg.ErrorMessage = &msg
		default:
			rg.State, rg.Epoch, rg.AssignmentEpoch, rg.AssignorName = g.GetState(), g.GetGroupEpoch(), g.GetAssignmentEpoch(), g.GetAssignorName()
			for _, m := range g.GetMembers() {
				rm := kmsg.NewConsumerGroupDescribeResponseGroupMember()
				rm.MemberID, rm.InstanceID, rm.RackID, rm.MemberEpoch = m.GetMemberId(), m.InstanceId, m.RackId, m.GetMemberEpoch()
				rm.ClientID, rm.ClientHost = m.GetClientId(), m.GetClientHost()
				rm.SubscribedTopics, rm.SubscribedTopicRegex = m.GetSubscribedTopicNames(), m.SubscribedTopicRegex
				if rm.SubscribedTopics == nil {
					rm.SubscribedTopics = []string{}
				}
				rm.Assignment.TopicPartitions = toAssignment(m.GetAssignment())
				rm.TargetAssignment.TopicPartitions = toAssignment(m.GetTargetAssignment())
				rm.MemberType = memberTypeConsumer
				rg.Members = append(rg.Members, rm)
			}
			if req.IncludeAuthorizedOperations {
				rg.AuthorizedOperations = x.operations(kafkaacl.ResourceGroup, id)
			}
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}

func toAssignment(tps []*coordinatorv1.TopicPartitions) []kmsg.AssignmentTopicPartition {
	out := make([]kmsg.AssignmentTopicPartition, 0, len(tps))
	for _, t := range tps {
		a := kmsg.NewAssignmentTopicPartition()
		copy(a.TopicID[:], t.GetTopicId())
		a.Topic, a.Partitions = t.GetTopicName(), t.GetPartitions()
		out = append(out, a)
	}
	return out
}
