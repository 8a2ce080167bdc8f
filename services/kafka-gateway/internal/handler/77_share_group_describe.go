package handler

// ShareGroupDescribe (API key 77), version 1 (KIP-932).
//
// Behaviour: each share group's state (Empty or Stable), group epoch, assignment epoch,
// assignor ("simple") and members (epochs, rack, client, subscribed topics, current
// assignment with topic ids and names) from the coordinator. A missing group is
// GROUP_ID_NOT_FOUND ("Group g not found."), so is a classic or consumer group ("Group
// g is not a share group."); an empty id is INVALID_GROUP_ID. Coordinator outage:
// COORDINATOR_NOT_AVAILABLE per group. Not served when group.share.enable is off.
//
// With the authorizer on: DESCRIBE on each group, else GROUP_AUTHORIZATION_FAILED for
// it, and authorized operations filled when asked (else INT32_MIN).
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
	register(kmsg.ShareGroupDescribe.Int16(), 1, 1, (*Handler).handleShareGroupDescribe)
}

func (h *Handler) handleShareGroupDescribe(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.ShareGroupDescribeRequest)
	resp := req.ResponseKind().(*kmsg.ShareGroupDescribeResponse)
	x := h.access(ctx, r)
	byID, code := describeGroups(ctx, h, "ShareGroupDescribe", x.groups(kafkaacl.OpDescribe, req.GroupIDs), h.shares != nil,
		func(ctx context.Context, ids []string) ([]*coordinatorv1.ShareGroupDescription, error) {
			out, err := h.shares.DescribeShareGroups(ctx, &coordinatorv1.DescribeShareGroupsRequest{GroupIds: ids})
			return out.GetGroups(), err
		})
	for _, id := range req.GroupIDs {
		rg := kmsg.NewShareGroupDescribeResponseGroup()
		rg.GroupID = id
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
			rg.GroupState, rg.GroupEpoch, rg.AssignmentEpoch, rg.Assignor = g.GetState(), g.GetGroupEpoch(), g.GetAssignmentEpoch(), g.GetAssignorName()
			for _, m := range g.GetMembers() {
				rm := kmsg.NewShareGroupDescribeResponseGroupMember()
				rm.MemberID, rm.RackID, rm.MemberEpoch = m.GetMemberId(), m.RackId, m.GetMemberEpoch()
				rm.ClientID, rm.ClientHost = m.GetClientId(), m.GetClientHost()
				rm.SubscribedTopicNames = m.GetSubscribedTopicNames()
				if rm.SubscribedTopicNames == nil {
					rm.SubscribedTopicNames = []string{}
				}
				for _, t := range m.GetAssignment() {
					a := kmsg.NewShareGroupDescribeResponseGroupMemberAssignmentTopicPartition()
					copy(a.TopicID[:], t.GetTopicId())
					a.Topic, a.Partitions = t.GetTopicName(), t.GetPartitions()
					rm.Assignment.TopicPartitions = append(rm.Assignment.TopicPartitions, a)
				}
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
