package handler

// DescribeGroups (API key 15), versions 0-6.
//
// Behaviour: state, protocol and members from the coordinator; member metadata and
// assignments only while the group is Stable (as Kafka). An unknown group is Dead with
// no error up to v5 and GROUP_ID_NOT_FOUND from v6 (KIP-1043). Coordinator outage:
// COORDINATOR_NOT_AVAILABLE per group. With the authorizer on: DESCRIBE on each group,
// else GROUP_AUTHORIZATION_FAILED for it (nothing else said), and authorized operations
// (v3+, KIP-430) filled when asked; with the authorizer off they stay INT32_MIN ("not
// provided").
//
// KIPs: KIP-430 (v3), KIP-345 (v4), KIP-482 (flexible v5+), KIP-1043 (v6).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() { register(kmsg.DescribeGroups.Int16(), 0, 6, (*Handler).handleDescribeGroups) }

func (h *Handler) handleDescribeGroups(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.DescribeGroupsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
	cctx, cancel := groupCtx(ctx, groupCallTimeout)
	defer cancel()
	out, err := h.groups.DescribeGroups(cctx, &coordinatorv1.DescribeGroupsRequest{GroupIds: req.Groups})
	code := h.groupCode("DescribeGroups", err)
	x := h.access(ctx, r)
	for i, id := range req.Groups {
		rg := kmsg.NewDescribeGroupsResponseGroup()
		rg.Group = id
		if !x.group(kafkaacl.OpDescribe, id) {
			rg.ErrorCode = kerr.GroupAuthorizationFailed.Code
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		if req.IncludeAuthorizedOperations && x != nil {
			rg.AuthorizedOperations = x.operations(kafkaacl.ResourceGroup, id)
		}
		if err != nil || i >= len(out.GetGroups()) {
			rg.ErrorCode = code
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		g := out.GetGroups()[i]
		rg.ErrorCode, rg.State, rg.ProtocolType, rg.Protocol = int16(g.GetErrorCode()), g.GetState(), g.GetProtocolType(), g.GetProtocol()
		if req.Version >= 6 && rg.ErrorCode == 0 && rg.State == "Dead" {
			rg.ErrorCode = kerr.GroupIDNotFound.Code
			rg.ErrorMessage = strPtr("group " + id + " not found")
		}
		for _, m := range g.GetMembers() {
			rm := kmsg.NewDescribeGroupsResponseGroupMember()
			rm.MemberID, rm.InstanceID, rm.ClientID, rm.ClientHost = m.GetMemberId(), m.GroupInstanceId, m.GetClientId(), m.GetClientHost()
			rm.ProtocolMetadata, rm.MemberAssignment = nonNil(m.GetMetadata()), nonNil(m.GetAssignment())
			rg.Members = append(rg.Members, rm)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}

// nonNil returns b, or an empty slice for nil (Kafka bytes fields are not nullable).
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
