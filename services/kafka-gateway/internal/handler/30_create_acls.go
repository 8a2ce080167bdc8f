package handler

// CreateAcls (API key 30), versions 1-3 (v0 removed in Kafka 4.0, KIP-896).
//
// Behaviour:
//   - Without an authorizer: SECURITY_DISABLED for every creation, as Kafka.
//   - The caller needs ALTER on the cluster: else CLUSTER_AUTHORIZATION_FAILED for
//     every creation.
//   - Each binding is stored by the coordinator in Postgres (a binding stored already
//     is a success); one Kafka refuses (UNKNOWN or ANY fields, MATCH pattern, empty
//     name, a cluster not literal "kafka-cluster", a principal not "Type:Name") is
//     INVALID_REQUEST with a message, the others are still stored. Every replica
//     applies the change at once (NATS), this one before answering.
//   - Coordinator unreachable: REQUEST_TIMED_OUT (retriable) for every creation.
//
// KIPs: KIP-11, KIP-290 (prefixed patterns, v1), KIP-482 (flexible v2+), KIP-896.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() { register(kmsg.CreateACLs.Int16(), 1, 3, (*Handler).handleCreateAcls) }

func (h *Handler) handleCreateAcls(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.CreateACLsRequest)
	resp := req.ResponseKind().(*kmsg.CreateACLsResponse)
	fail := func(code int16, msg *string) (kmsg.Response, error) {
		for range req.Creations {
			res := kmsg.NewCreateACLsResponseResult()
			res.ErrorCode, res.ErrorMessage = code, msg
			resp.Results = append(resp.Results, res)
		}
		return resp, nil
	}
	if code := h.aclAdmin(ctx, r, kafkaacl.OpAlter); code != 0 {
		return fail(code, nil)
	}
	creq := &coordinatorv1.CreateAclsRequest{}
	for _, c := range req.Creations {
		creq.Creations = append(creq.Creations, &coordinatorv1.AclBinding{
			ResourceType: int32(c.ResourceType), ResourceName: c.ResourceName, PatternType: int32(c.ResourcePatternType),
			Principal: c.Principal, Host: c.Host, Operation: int32(c.Operation), PermissionType: int32(c.PermissionType)})
	}
	out, err := h.acls.CreateAcls(ctx, creq)
	if err != nil {
		return fail(controlCode(err), errMessage(err))
	}
	h.auth.load(ctx, true)
	for i := range req.Creations {
		res := kmsg.NewCreateACLsResponseResult()
		if i < len(out.GetResults()) {
			res.ErrorCode, res.ErrorMessage = int16(out.GetResults()[i].GetErrorCode()), strPtr(out.GetResults()[i].GetErrorMessage())
		}
		resp.Results = append(resp.Results, res)
	}
	return resp, nil
}
