package handler

// Heartbeat (API key 12), versions 0-4.
//
// Behaviour: forwarded to the coordinator, which extends the member's session by its
// session timeout. REBALANCE_IN_PROGRESS tells the member to rejoin; ILLEGAL_GENERATION,
// UNKNOWN_MEMBER_ID and FENCED_INSTANCE_ID (v3+, KIP-345) as Kafka. Coordinator outage:
// COORDINATOR_NOT_AVAILABLE.
//
// With the authorizer on: READ on the group, else GROUP_AUTHORIZATION_FAILED.
//
// KIPs: KIP-345 (v3), KIP-482 (flexible v4+).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() { register(kmsg.Heartbeat.Int16(), 0, 4, (*Handler).handleHeartbeat) }

func (h *Handler) handleHeartbeat(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.HeartbeatRequest)
	resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
	if !h.access(ctx, r).group(kafkaacl.OpRead, req.Group) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return resp, nil
	}
	cctx, cancel := groupCtx(ctx, groupCallTimeout)
	defer cancel()
	out, err := h.groups.Heartbeat(cctx, &coordinatorv1.HeartbeatRequest{
		GroupId: req.Group, GenerationId: req.Generation, MemberId: req.MemberID, GroupInstanceId: req.InstanceID,
	})
	if err != nil {
		resp.ErrorCode = h.groupCode("Heartbeat", err)
		return resp, nil
	}
	resp.ErrorCode = int16(out.GetErrorCode())
	return resp, nil
}
