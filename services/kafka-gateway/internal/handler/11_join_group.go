package handler

// JoinGroup (API key 11), versions 2-9 (KIP-896: v0-1 are gone from Kafka 4.0).
//
// Behaviour: forwarded to the coordinator's GroupCoordinatorService, which runs the
// classic group protocol with the group's state in Postgres and answers when the join
// phase ends (at most the member's rebalance timeout). v4+ members must join with a
// member id: the first join answers MEMBER_ID_REQUIRED with one (KIP-394). v5+ carries
// group.instance.id (KIP-345 static membership). v9's skip_assignment (KIP-814) tells a
// rejoining static leader not to reassign; older versions get an empty leader id instead
// so that member acts as a follower. Coordinator outage: COORDINATOR_NOT_AVAILABLE.
//
// With the authorizer on: READ on the group, else GROUP_AUTHORIZATION_FAILED.
//
// KIPs: KIP-394 (v4), KIP-345 (v5), KIP-482 (flexible v6+), KIP-559 (protocol type v7),
// KIP-800 (reason v8), KIP-814 (v9), KIP-896.

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() { register(kmsg.JoinGroup.Int16(), 2, 9, (*Handler).handleJoinGroup) }

func (h *Handler) handleJoinGroup(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.JoinGroupRequest)
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	if !h.access(ctx, r).group(kafkaacl.OpRead, req.Group) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		resp.Generation = -1
		if req.Version < 7 {
			resp.Protocol = new(string)
		}
		return resp, nil
	}
	creq := &coordinatorv1.JoinGroupRequest{
		GroupId:              req.Group,
		SessionTimeoutMs:     req.SessionTimeoutMillis,
		RebalanceTimeoutMs:   req.RebalanceTimeoutMillis,
		MemberId:             req.MemberID,
		GroupInstanceId:      req.InstanceID,
		ProtocolType:         req.ProtocolType,
		RequireKnownMemberId: req.Version >= 4,
		ClientHost:           r.ClientHost,
	}
	if r.ClientID != nil {
		creq.ClientId = *r.ClientID
	}
	if req.Reason != nil {
		creq.Reason = *req.Reason
	}
	for _, p := range req.Protocols {
		creq.Protocols = append(creq.Protocols, &coordinatorv1.GroupProtocol{Name: p.Name, Metadata: p.Metadata})
	}
	wait := time.Duration(max(req.RebalanceTimeoutMillis, req.SessionTimeoutMillis))*time.Millisecond + groupWaitSlack
	cctx, cancel := groupCtx(ctx, wait)
	defer cancel()
	out, err := h.groups.JoinGroup(cctx, creq)
	if err != nil {
		resp.ErrorCode = h.groupCode("JoinGroup", err)
		resp.Generation, resp.MemberID = -1, req.MemberID
		if req.Version < 7 {
			resp.Protocol = new(string)
		}
		return resp, nil
	}
	resp.ErrorCode = int16(out.GetErrorCode())
	resp.Generation = out.GetGenerationId()
	resp.MemberID = out.GetMemberId()
	resp.LeaderID = out.GetLeader()
	pt, pn := out.GetProtocolType(), out.GetProtocolName()
	if resp.ErrorCode == 0 || req.Version < 7 {
		resp.ProtocolType, resp.Protocol = &pt, &pn
	}
	if out.GetSkipAssignment() {
		if req.Version >= 9 {
			resp.SkipAssignment = true
		} else {
			resp.LeaderID = ""
		}
	}
	if !out.GetSkipAssignment() || req.Version >= 9 {
		for _, m := range out.GetMembers() {
			rm := kmsg.NewJoinGroupResponseMember()
			rm.MemberID, rm.InstanceID, rm.ProtocolMetadata = m.GetMemberId(), m.GroupInstanceId, m.GetMetadata()
			resp.Members = append(resp.Members, rm)
		}
	}
	return resp, nil
}
