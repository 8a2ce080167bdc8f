package server

import (
	"strings"

	"google.golang.org/grpc"

	"github.com/tributary/tributary/libs/grpcx"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

// authRules is the verb every coordinator RPC needs with --auth=required, on the whole
// cluster (a right on "*"): read for what only looks (Get*, List*, Describe*,
// OffsetFetch), admin for everything else: creating and deleting topics and
// subscriptions, group membership and commits, transactions. The Kafka principals of
// kafka-gateway's clients are not seen here: the gateway calls with its own
// certificate, which holds every right. Services not listed (added later) need admin.
var authRules = coordinatorRules(
	coordinatorv1.CoordinatorService_ServiceDesc,
	coordinatorv1.GroupCoordinatorService_ServiceDesc,
	coordinatorv1.ConsumerGroupService_ServiceDesc,
	coordinatorv1.ShareGroupService_ServiceDesc,
	coordinatorv1.TransactionCoordinatorService_ServiceDesc,
	coordinatorv1.PubSubRegistryService_ServiceDesc,
	coordinatorv1.PubSubSchemaService_ServiceDesc,
	coordinatorv1.AclService_ServiceDesc,
	coordinatorv1.CredentialService_ServiceDesc,
	coordinatorv1.MqttUserService_ServiceDesc,
)

// GetScramCredential hands out SCRAM keys (a ServerKey lets its holder pose as the
// server to that user) and GetMqttUser a password hash (which an offline guesser
// could try passwords against): admin, not read, unlike the other Get methods.
func init() {
	authRules["/"+coordinatorv1.CredentialService_ServiceDesc.ServiceName+"/GetScramCredential"] = grpcx.Rule{Verb: grpcx.VerbAdmin}
	authRules[coordinatorv1.MqttUserService_GetMqttUser_FullMethodName] = grpcx.Rule{Verb: grpcx.VerbAdmin}
}

func coordinatorRules(descs ...grpc.ServiceDesc) grpcx.Rules {
	rules := grpcx.Rules{}
	add := func(service, method string) {
		verb := grpcx.VerbAdmin
		for _, p := range []string{"Get", "List", "Describe", "OffsetFetch"} {
			if strings.HasPrefix(method, p) {
				verb = grpcx.VerbRead
			}
		}
		rules["/"+service+"/"+method] = grpcx.Rule{Verb: verb}
	}
	for _, d := range descs {
		for _, m := range d.Methods {
			add(d.ServiceName, m.MethodName)
		}
		for _, s := range d.Streams {
			add(d.ServiceName, s.StreamName)
		}
	}
	return rules
}
