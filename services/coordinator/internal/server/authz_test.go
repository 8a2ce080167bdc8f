package server

import (
	"testing"

	"github.com/tributary/tributary/libs/grpcx"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

// Looking is read, everything else admin; every RPC of the six services has a rule.
func TestAuthRules(t *testing.T) {
	for method, want := range map[string]grpcx.Verb{
		coordinatorv1.CoordinatorService_GetTopics_FullMethodName:                       grpcx.VerbRead,
		coordinatorv1.CoordinatorService_DescribeTopicConfigs_FullMethodName:            grpcx.VerbRead,
		coordinatorv1.GroupCoordinatorService_OffsetFetch_FullMethodName:                grpcx.VerbRead,
		coordinatorv1.GroupCoordinatorService_GetCommittedOffsets_FullMethodName:        grpcx.VerbRead,
		coordinatorv1.PubSubRegistryService_ListPubSubTopics_FullMethodName:             grpcx.VerbRead,
		coordinatorv1.CoordinatorService_CreateTopics_FullMethodName:                    grpcx.VerbAdmin,
		coordinatorv1.CoordinatorService_DeleteTopics_FullMethodName:                    grpcx.VerbAdmin,
		coordinatorv1.GroupCoordinatorService_OffsetCommit_FullMethodName:               grpcx.VerbAdmin,
		coordinatorv1.TransactionCoordinatorService_EndTxn_FullMethodName:               grpcx.VerbAdmin,
		coordinatorv1.PubSubRegistryService_RecordPubSubActivity_FullMethodName:         grpcx.VerbAdmin,
		coordinatorv1.PubSubSchemaService_CommitPubSubSchemaRevision_FullMethodName:     grpcx.VerbAdmin,
		coordinatorv1.TransactionCoordinatorService_DescribeTransactions_FullMethodName: grpcx.VerbRead,
		coordinatorv1.AclService_DescribeAcls_FullMethodName:                            grpcx.VerbRead,
		coordinatorv1.AclService_CreateAcls_FullMethodName:                              grpcx.VerbAdmin,
		coordinatorv1.AclService_DeleteAcls_FullMethodName:                              grpcx.VerbAdmin,
		coordinatorv1.MqttUserService_PutMqttUser_FullMethodName:                        grpcx.VerbAdmin,
		coordinatorv1.MqttUserService_DeleteMqttUser_FullMethodName:                     grpcx.VerbAdmin,
		coordinatorv1.MqttUserService_GetMqttUser_FullMethodName:                        grpcx.VerbAdmin,
		coordinatorv1.MqttUserService_ListMqttUsers_FullMethodName:                      grpcx.VerbRead,
	} {
		if r, ok := authRules[method]; !ok || r.Verb != want || r.Resources != nil {
			t.Errorf("%s: rule %+v (%v), want %v on the cluster", method, r, ok, want)
		}
	}
	n := 0
	for _, d := range []int{
		len(coordinatorv1.CoordinatorService_ServiceDesc.Methods), len(coordinatorv1.GroupCoordinatorService_ServiceDesc.Methods),
		len(coordinatorv1.TransactionCoordinatorService_ServiceDesc.Methods), len(coordinatorv1.PubSubRegistryService_ServiceDesc.Methods),
		len(coordinatorv1.PubSubSchemaService_ServiceDesc.Methods), len(coordinatorv1.AclService_ServiceDesc.Methods),
	} {
		n += d
	}
	if len(authRules) < n {
		t.Errorf("%d rules for %d unary methods", len(authRules), n)
	}
}
