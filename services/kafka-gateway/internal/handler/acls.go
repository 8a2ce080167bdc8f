package handler

// Helpers shared by DescribeAcls (29), CreateAcls (30) and DeleteAcls (31).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"google.golang.org/grpc"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

// aclAdmin is the outcome of the checks every ACL API makes first: 0 to go on, or the
// code the whole request is answered with (SECURITY_DISABLED without an authorizer,
// CLUSTER_AUTHORIZATION_FAILED without op on the cluster).
func (h *Handler) aclAdmin(ctx context.Context, r *Request, op kafkaacl.Operation) int16 {
	if h.auth == nil {
		return kerr.SecurityDisabled.Code
	}
	if !h.access(ctx, r).cluster(op) {
		return kerr.ClusterAuthorizationFailed.Code
	}
	return 0
}

// protoFilter builds the coordinator's filter from a Kafka filter's fields.
func protoFilter(rt, pt, op, perm int8, name, principal, host *string) *coordinatorv1.AclFilter {
	return &coordinatorv1.AclFilter{ResourceType: int32(rt), ResourceName: name, PatternType: int32(pt),
		Principal: principal, Host: host, Operation: int32(op), PermissionType: int32(perm)}
}

// unavailableAcls answers every ACL call with UNAVAILABLE.
type unavailableAcls struct{}

func (unavailableAcls) CreateAcls(context.Context, *coordinatorv1.CreateAclsRequest, ...grpc.CallOption) (*coordinatorv1.CreateAclsResponse, error) {
	return nil, status503()
}

func (unavailableAcls) DeleteAcls(context.Context, *coordinatorv1.DeleteAclsRequest, ...grpc.CallOption) (*coordinatorv1.DeleteAclsResponse, error) {
	return nil, status503()
}

func (unavailableAcls) DescribeAcls(context.Context, *coordinatorv1.DescribeAclsRequest, ...grpc.CallOption) (*coordinatorv1.DescribeAclsResponse, error) {
	return nil, status503()
}
