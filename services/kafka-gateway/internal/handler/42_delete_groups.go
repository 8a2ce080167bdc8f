package handler

// DeleteGroups (API key 42), versions 0-2.
//
// Behaviour: the coordinator deletes Empty groups with their committed offsets; a group
// with members is NON_EMPTY_GROUP, an unknown one GROUP_ID_NOT_FOUND, an empty id
// INVALID_GROUP_ID. Coordinator outage: COORDINATOR_NOT_AVAILABLE per group.
//
// With the authorizer on: DELETE on each group, else GROUP_AUTHORIZATION_FAILED for it
// (not sent).
//
// KIPs: KIP-229, KIP-482 (flexible v2+).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() { register(kmsg.DeleteGroups.Int16(), 0, 2, (*Handler).handleDeleteGroups) }

func (h *Handler) handleDeleteGroups(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.DeleteGroupsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
	x := h.access(ctx, r)
	var ids []string
	for _, id := range req.Groups {
		if x.group(kafkaacl.OpDelete, id) {
			ids = append(ids, id)
		}
	}
	var (
		out *coordinatorv1.DeleteGroupsResponse
		err error
	)
	if len(ids) > 0 {
		cctx, cancel := groupCtx(ctx, groupCallTimeout)
		defer cancel()
		out, err = h.groups.DeleteGroups(cctx, &coordinatorv1.DeleteGroupsRequest{GroupIds: ids})
	}
	code := h.groupCode("DeleteGroups", err)
	i := 0
	for _, id := range req.Groups {
		rg := kmsg.NewDeleteGroupsResponseGroup()
		if i >= len(ids) || ids[i] != id {
			rg.Group, rg.ErrorCode = id, kerr.GroupAuthorizationFailed.Code
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		rg.Group, rg.ErrorCode = id, code
		if err == nil && i < len(out.GetResults()) {
			rg.ErrorCode = int16(out.GetResults()[i].GetErrorCode())
		}
		i++
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}
