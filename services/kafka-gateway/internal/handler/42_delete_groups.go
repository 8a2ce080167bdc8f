package handler

// DeleteGroups (API key 42), versions 0-2.
//
// Behaviour: the coordinator deletes Empty groups with their committed offsets; a group
// with members is NON_EMPTY_GROUP, an unknown one GROUP_ID_NOT_FOUND, an empty id
// INVALID_GROUP_ID. Coordinator outage: COORDINATOR_NOT_AVAILABLE per group.
//
// KIPs: KIP-229, KIP-482 (flexible v2+).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() { register(kmsg.DeleteGroups.Int16(), 0, 2, (*Handler).handleDeleteGroups) }

func (h *Handler) handleDeleteGroups(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.DeleteGroupsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
	cctx, cancel := groupCtx(ctx, groupCallTimeout)
	defer cancel()
	out, err := h.groups.DeleteGroups(cctx, &coordinatorv1.DeleteGroupsRequest{GroupIds: req.Groups})
	code := h.groupCode("DeleteGroups", err)
	for i, id := range req.Groups {
		rg := kmsg.NewDeleteGroupsResponseGroup()
		rg.Group, rg.ErrorCode = id, code
		if err == nil && i < len(out.GetResults()) {
			rg.ErrorCode = int16(out.GetResults()[i].GetErrorCode())
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}
