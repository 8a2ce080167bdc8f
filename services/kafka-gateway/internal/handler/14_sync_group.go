package handler

// SyncGroup (API key 14), versions 0-5.
//
// Behaviour: forwarded to the coordinator. The leader's SyncGroup carries every member's
// assignment and makes the group Stable; a follower's waits until then (or until a new
// rebalance: REBALANCE_IN_PROGRESS). v5+ carries the protocol type and name, checked
// against the group's (INCONSISTENT_GROUP_PROTOCOL) and echoed back. Coordinator outage:
// COORDINATOR_NOT_AVAILABLE.
//
// With the authorizer on: READ on the group, else GROUP_AUTHORIZATION_FAILED.
//
// KIPs: KIP-345 (v3), KIP-482 (flexible v4+), KIP-559 (v5).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() { register(kmsg.SyncGroup.Int16(), 0, 5, (*Handler).handleSyncGroup) }

func (h *Handler) handleSyncGroup(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.SyncGroupRequest)
	resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
	if !h.access(ctx, r).group(kafkaacl.OpRead, req.Group) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		resp.MemberAssignment = []byte{}
		return resp, nil
	}
	creq := &coordinatorv1.SyncGroupRequest{
		GroupId: req.Group, GenerationId: req.Generation, MemberId: req.MemberID, GroupInstanceId: req.InstanceID,
		ProtocolType: req.ProtocolType, ProtocolName: req.Protocol,
	}
	for _, a := range req.GroupAssignment {
		creq.Assignments = append(creq.Assignments, &coordinatorv1.SyncGroupAssignment{MemberId: a.MemberID, Assignment: a.MemberAssignment})
	}
	cctx, cancel := groupCtx(ctx, maxGroupWait)
	defer cancel()
	out, err := h.groups.SyncGroup(cctx, creq)
	if err != nil {
		resp.ErrorCode = h.groupCode("SyncGroup", err)
		resp.MemberAssignment = []byte{}
		return resp, nil
	}
	resp.ErrorCode = int16(out.GetErrorCode())
	resp.MemberAssignment = out.GetAssignment()
	if resp.MemberAssignment == nil {
		resp.MemberAssignment = []byte{}
	}
	if resp.ErrorCode == 0 {
		pt, pn := out.GetProtocolType(), out.GetProtocolName()
		resp.ProtocolType, resp.Protocol = &pt, &pn
	}
	return resp, nil
}
