package handler

// LeaveGroup (API key 13), versions 0-5.
//
// Behaviour: forwarded to the coordinator. v0-2 name one member id and carry its outcome
// in the top-level error; v3+ leave in batches by member id or group.instance.id
// (KIP-345), each member with its own error. Coordinator outage:
// COORDINATOR_NOT_AVAILABLE.
//
// With the authorizer on: READ on the group, else GROUP_AUTHORIZATION_FAILED.
//
// KIPs: KIP-345 (batch v3), KIP-482 (flexible v4+), KIP-800 (reason v5).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() { register(kmsg.LeaveGroup.Int16(), 0, 5, (*Handler).handleLeaveGroup) }

func (h *Handler) handleLeaveGroup(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.LeaveGroupRequest)
	resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	if !h.access(ctx, r).group(kafkaacl.OpRead, req.Group) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return resp, nil
	}
	creq := &coordinatorv1.LeaveGroupRequest{GroupId: req.Group}
	members := req.Members
	if req.Version < 3 {
		members = []kmsg.LeaveGroupRequestMember{{MemberID: req.MemberID}}
	}
	for _, m := range members {
		lm := &coordinatorv1.LeavingMember{MemberId: m.MemberID, GroupInstanceId: m.InstanceID}
		if m.Reason != nil {
			lm.Reason = *m.Reason
		}
		creq.Members = append(creq.Members, lm)
	}
	cctx, cancel := groupCtx(ctx, groupCallTimeout)
	defer cancel()
	out, err := h.groups.LeaveGroup(cctx, creq)
	if err != nil {
		resp.ErrorCode = h.groupCode("LeaveGroup", err)
		return resp, nil
	}
	resp.ErrorCode = int16(out.GetErrorCode())
	if req.Version < 3 {
		if resp.ErrorCode == 0 && len(out.GetMembers()) == 1 {
			resp.ErrorCode = int16(out.GetMembers()[0].GetErrorCode())
		}
		return resp, nil
	}
	for _, m := range out.GetMembers() {
		rm := kmsg.NewLeaveGroupResponseMember()
		rm.MemberID, rm.InstanceID, rm.ErrorCode = m.GetMemberId(), m.GroupInstanceId, int16(m.GetErrorCode())
		resp.Members = append(resp.Members, rm)
	}
	return resp, nil
}
