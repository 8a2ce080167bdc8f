package handler

// DeleteAcls (API key 31), versions 1-3 (v0 removed in Kafka 4.0, KIP-896).
//
// Behaviour:
//   - Without an authorizer: SECURITY_DISABLED for every filter, as Kafka.
//   - The caller needs ALTER on the cluster: else CLUSTER_AUTHORIZATION_FAILED for
//     every filter.
//   - Each filter (DescribeAcls' semantics, MATCH included) removes the bindings it
//     matches, returned as its matching ACLs; a filter with an UNKNOWN field is
//     INVALID_REQUEST and removes nothing. The coordinator applies all filters in one
//     Postgres transaction; every replica applies the change at once (NATS), this one
//     before answering.
//   - Coordinator unreachable: REQUEST_TIMED_OUT (retriable) for every filter.
//
// KIPs: KIP-11, KIP-290 (prefixed patterns, v1), KIP-482 (flexible v2+), KIP-896.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() { register(kmsg.DeleteACLs.Int16(), 1, 3, (*Handler).handleDeleteAcls) }

func (h *Handler) handleDeleteAcls(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.DeleteACLsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteACLsResponse)
	fail := func(code int16, msg *string) (kmsg.Response, error) {
		for range req.Filters {
			res := kmsg.NewDeleteACLsResponseResult()
			res.ErrorCode, res.ErrorMessage = code, msg
			resp.Results = append(resp.Results, res)
		}
		return resp, nil
	}
	if code := h.aclAdmin(ctx, r, kafkaacl.OpAlter); code != 0 {
		return fail(code, nil)
	}
	dreq := &coordinatorv1.DeleteAclsRequest{}
	for _, f := range req.Filters {
		dreq.Filters = append(dreq.Filters, protoFilter(int8(f.ResourceType), int8(f.ResourcePatternType), int8(f.Operation),
			int8(f.PermissionType), f.ResourceName, f.Principal, f.Host))
	}
	out, err := h.acls.DeleteAcls(ctx, dreq)
	if err != nil {
		return fail(controlCode(err), errMessage(err))
	}
	h.auth.load(ctx, true)
	for i := range req.Filters {
		res := kmsg.NewDeleteACLsResponseResult()
		if i < len(out.GetResults()) {
			o := out.GetResults()[i]
			res.ErrorCode, res.ErrorMessage = int16(o.GetErrorCode()), strPtr(o.GetErrorMessage())
			for _, b := range o.GetDeleted() {
				m := kmsg.NewDeleteACLsResponseResultMatchingACL()
				m.ResourceType = kmsg.ACLResourceType(b.GetResourceType())
				m.ResourceName = b.GetResourceName()
				m.ResourcePatternType = kmsg.ACLResourcePatternType(b.GetPatternType())
				m.Principal, m.Host = b.GetPrincipal(), b.GetHost()
				m.Operation = kmsg.ACLOperation(b.GetOperation())
				m.PermissionType = kmsg.ACLPermissionType(b.GetPermissionType())
				res.MatchingACLs = append(res.MatchingACLs, m)
			}
		}
		resp.Results = append(resp.Results, res)
	}
	return resp, nil
}
