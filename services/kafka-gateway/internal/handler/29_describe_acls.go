package handler

// DescribeAcls (API key 29), versions 1-3 (v0 removed in Kafka 4.0, KIP-896).
//
// Behaviour:
//   - Without an authorizer (--authorizer unset): SECURITY_DISABLED, as Kafka.
//   - The caller needs DESCRIBE on the cluster (ALTER implies it): else
//     CLUSTER_AUTHORIZATION_FAILED.
//   - The filter (Kafka AclBindingFilter: ANY fields, null strings, pattern type MATCH
//     selecting the literal name, the literal "*" and the prefixes of the name) is
//     applied by the coordinator to the ACLs in Postgres; a filter with an UNKNOWN
//     field is INVALID_REQUEST. Bindings are grouped per resource pattern.
//   - Coordinator unreachable: REQUEST_TIMED_OUT (retriable).
//
// KIPs: KIP-11 (ACLs), KIP-290 (prefixed patterns, v1), KIP-482 (flexible v2+),
// KIP-896 (v0 removed).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() { register(kmsg.DescribeACLs.Int16(), 1, 3, (*Handler).handleDescribeAcls) }

func (h *Handler) handleDescribeAcls(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.DescribeACLsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeACLsResponse)
	if code := h.aclAdmin(ctx, r, kafkaacl.OpDescribe); code != 0 {
		resp.ErrorCode = code
		return resp, nil
	}
	f := protoFilter(int8(req.ResourceType), int8(req.ResourcePatternType), int8(req.Operation), int8(req.PermissionType),
		req.ResourceName, req.Principal, req.Host)
	out, err := h.acls.DescribeAcls(ctx, &coordinatorv1.DescribeAclsRequest{Filter: f})
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = controlCode(err), errMessage(err)
		return resp, nil
	}
	if out.GetErrorCode() != 0 {
		resp.ErrorCode, resp.ErrorMessage = int16(out.GetErrorCode()), strPtr(out.GetErrorMessage())
		return resp, nil
	}
	// The coordinator sorts by resource type, pattern type and name first, so each
	// resource's bindings are adjacent.
	for _, b := range out.GetAcls() {
		n := len(resp.Resources)
		if n == 0 || int32(resp.Resources[n-1].ResourceType) != b.GetResourceType() ||
			int32(resp.Resources[n-1].ResourcePatternType) != b.GetPatternType() || resp.Resources[n-1].ResourceName != b.GetResourceName() {
			res := kmsg.NewDescribeACLsResponseResource()
			res.ResourceType = kmsg.ACLResourceType(b.GetResourceType())
			res.ResourceName = b.GetResourceName()
			res.ResourcePatternType = kmsg.ACLResourcePatternType(b.GetPatternType())
			resp.Resources = append(resp.Resources, res)
			n++
		}
		a := kmsg.NewDescribeACLsResponseResourceACL()
		a.Principal, a.Host = b.GetPrincipal(), b.GetHost()
		a.Operation = kmsg.ACLOperation(b.GetOperation())
		a.PermissionType = kmsg.ACLPermissionType(b.GetPermissionType())
		resp.Resources[n-1].ACLs = append(resp.Resources[n-1].ACLs, a)
	}
	return resp, nil
}
