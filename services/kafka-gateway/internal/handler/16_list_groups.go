package handler

// ListGroups (API key 16), versions 0-5.
//
// Behaviour: every group the coordinator knows, with its protocol type; v4+ adds the
// state and a case-insensitive state filter (KIP-518); v5+ adds the group type
// ("classic", or "consumer" for KIP-848 groups) and a case-insensitive type filter on
// it. Coordinator outage: COORDINATOR_NOT_AVAILABLE.
//
// With the authorizer on: DESCRIBE on the cluster lists every group, else only the
// groups the principal may DESCRIBE.
//
// KIPs: KIP-482 (flexible v3+), KIP-518 (v4), KIP-848 (v5).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() { register(kmsg.ListGroups.Int16(), 0, 5, (*Handler).handleListGroups) }

// classicGroupType is the group type of a classic group (KIP-848).
const classicGroupType = "classic"

func (h *Handler) handleListGroups(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.ListGroupsRequest)
	resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
	cctx, cancel := groupCtx(ctx, groupCallTimeout)
	defer cancel()
	out, err := h.groups.ListGroups(cctx, &coordinatorv1.ListGroupsRequest{StatesFilter: req.StatesFilter, TypesFilter: req.TypesFilter})
	if err != nil {
		resp.ErrorCode = h.groupCode("ListGroups", err)
		return resp, nil
	}
	resp.ErrorCode = int16(out.GetErrorCode())
	x := h.access(ctx, r)
	everything := x.cluster(kafkaacl.OpDescribe)
	for _, g := range out.GetGroups() {
		if !everything && !x.group(kafkaacl.OpDescribe, g.GetGroupId()) {
			continue
		}
		rg := kmsg.NewListGroupsResponseGroup()
		rg.Group, rg.ProtocolType, rg.GroupState, rg.GroupType = g.GetGroupId(), g.GetProtocolType(), g.GetState(), g.GetGroupType()
		if rg.GroupType == "" {
			rg.GroupType = classicGroupType
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}
