package handler

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	"github.com/tributary/tributary/services/kafka-gateway/internal/fake"
)

// Without a coordinator connection the KIP-848 APIs answer COORDINATOR_NOT_AVAILABLE
// (retriable), never a dropped connection.
func TestConsumerGroupAPIsWithoutCoordinator(t *testing.T) {
	e, _ := newGroupEnv(t)
	for v := int16(0); v <= 1; v++ {
		hb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		hb.Group, hb.MemberID, hb.RebalanceTimeoutMillis, hb.SubscribedTopicNames = "g", "m", 5000, []string{"t"}
		if got := e.do(t, hb, v).(*kmsg.ConsumerGroupHeartbeatResponse); got.ErrorCode != kerr.CoordinatorNotAvailable.Code {
			t.Errorf("ConsumerGroupHeartbeat v%d: %v", v, kerr.ErrorForCode(got.ErrorCode))
		}
		d := kmsg.NewPtrConsumerGroupDescribeRequest()
		d.Groups = []string{"g", "h"}
		got := e.do(t, d, v).(*kmsg.ConsumerGroupDescribeResponse)
		if len(got.Groups) != 2 || got.Groups[0].ErrorCode != kerr.CoordinatorNotAvailable.Code || got.Groups[1].Group != "h" {
			t.Errorf("ConsumerGroupDescribe v%d: %+v", v, got.Groups)
		}
	}
}

// heartbeatCapture is a ConsumerGroupService that keeps the last heartbeat it got.
type heartbeatCapture struct {
	coordinatorv1.ConsumerGroupServiceClient
	got *coordinatorv1.ConsumerGroupHeartbeatRequest
}

func (c *heartbeatCapture) ConsumerGroupHeartbeat(_ context.Context, req *coordinatorv1.ConsumerGroupHeartbeatRequest, _ ...grpc.CallOption) (*coordinatorv1.ConsumerGroupHeartbeatResponse, error) {
	c.got = req
	return &coordinatorv1.ConsumerGroupHeartbeatResponse{MemberId: req.GetMemberId(), MemberEpoch: 1}, nil
}

// With the authorizer on, a ConsumerGroupHeartbeat tells the coordinator whom to
// authorize its regex's matches for (KIP-848: only topics the member may DESCRIBE are
// assigned): the caller's principal, host and allow.everyone.if.no.acl.found; nothing
// for a super user, nor with the authorizer off.
func TestConsumerGroupHeartbeatRegexAuthorization(t *testing.T) {
	for _, c := range []struct {
		name      string
		enabled   bool
		principal string
		want      *coordinatorv1.RegexAuthorization
	}{
		{"user", true, alice, &coordinatorv1.RegexAuthorization{Principal: alice, Host: "10.0.0.1", AllowIfNoAcl: true}},
		{"anonymous", true, "", &coordinatorv1.RegexAuthorization{Principal: AnonymousPrincipal, Host: "10.0.0.1", AllowIfNoAcl: true}},
		{"super user", true, "User:admin", nil},
		{"authorizer off", false, alice, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := fake.NewStorage()
			acls := &fakeAcls{}
			acls.add(grant(kafkaacl.ResourceGroup, "g", kafkaacl.WildcardPrincipal, kafkaacl.OpRead))
			cg := &heartbeatCapture{}
			cfg := Config{NodeID: 1, ClusterID: "unit", Authorizer: AuthorizerConfig{Enabled: c.enabled, SuperUsers: []string{"User:admin"}, AllowIfNoACL: true}}
			h := New(cfg, Deps{Storage: st, Coordinator: fake.NewCoordinator(st), Acls: acls, Consumers: cg, Log: zaptest.NewLogger(t)})
			e := &authEnv{env: &env{h: h, st: st}, acls: acls}
			hb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
			hb.Group, hb.MemberID, hb.RebalanceTimeoutMillis, hb.SubscribedTopicRegex = "g", "m", 5000, kmsg.StringPtr("orders-.*")
			if r := e.as(t, c.principal, hb, 1).(*kmsg.ConsumerGroupHeartbeatResponse); r.ErrorCode != 0 {
				t.Fatalf("heartbeat: %s", code(r.ErrorCode))
			}
			if got := cg.got.GetRegexAuthorization(); !proto.Equal(got, c.want) {
				t.Fatalf("regex authorization %v, want %v", got, c.want)
			}
		})
	}
}
