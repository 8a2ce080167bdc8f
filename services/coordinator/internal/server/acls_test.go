package server

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/tributary/tributary/libs/kafkaacl"
	"github.com/tributary/tributary/libs/natsx"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func aclBinding(name string, pt kafkaacl.PatternType, principal string, op kafkaacl.Operation) *coordinatorv1.AclBinding {
	return &coordinatorv1.AclBinding{ResourceType: int32(kafkaacl.ResourceTopic), ResourceName: name, PatternType: int32(pt),
		Principal: principal, Host: "*", Operation: int32(op), PermissionType: int32(kafkaacl.PermissionAllow)}
}

// TestAcls stores, describes with ANY and MATCH filters, and deletes ACLs on one
// replica and reads them on another; each change is announced on NATS.
func TestAcls(t *testing.T) {
	e := newEnv(t)
	a := start(t, e.cfg, true)
	b := start(t, e.cfg, true)
	dial := func(r *running) coordinatorv1.AclServiceClient {
		cc, err := grpc.NewClient(r.srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		return coordinatorv1.NewAclServiceClient(cc)
	}
	ca, cb := dial(a), dial(b)
	changed := make(chan struct{}, 16)
	sub, err := e.nc.Subscribe(natsx.AclsChangedSubject(e.cfg.ClusterID), func(*nats.Msg) { changed <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)

	bad := aclBinding("x", kafkaacl.PatternMatch, "User:alice", kafkaacl.OpRead)
	cresp, err := ca.CreateAcls(ctx, &coordinatorv1.CreateAclsRequest{Creations: []*coordinatorv1.AclBinding{
		aclBinding("orders", kafkaacl.PatternLiteral, "User:alice", kafkaacl.OpRead),
		aclBinding("ord", kafkaacl.PatternPrefixed, "User:alice", kafkaacl.OpWrite),
		aclBinding("*", kafkaacl.PatternLiteral, "User:*", kafkaacl.OpDescribe),
		aclBinding("orders", kafkaacl.PatternLiteral, "User:alice", kafkaacl.OpRead), // the same again
		bad,
		aclBinding("other", kafkaacl.PatternLiteral, "alice", kafkaacl.OpRead), // no principal type
	}})
	if err != nil {
		t.Fatal(err)
	}
	var codes []int32
	for _, r := range cresp.GetResults() {
		codes = append(codes, r.GetErrorCode())
	}
	if want := []int32{0, 0, 0, 0, 42, 42}; !equalInt32(codes, want) {
		t.Fatalf("create codes %v, want %v", codes, want)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no acls.changed announcement after CreateAcls")
	}

	all, err := cb.DescribeAcls(ctx, &coordinatorv1.DescribeAclsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.GetAcls()) != 3 {
		t.Fatalf("describe all on the other replica: %d bindings, want 3: %v", len(all.GetAcls()), all.GetAcls())
	}
	name := "orders"
	match, err := cb.DescribeAcls(ctx, &coordinatorv1.DescribeAclsRequest{Filter: &coordinatorv1.AclFilter{
		ResourceType: int32(kafkaacl.ResourceTopic), ResourceName: &name, PatternType: int32(kafkaacl.PatternMatch),
		Operation: int32(kafkaacl.OpAny), PermissionType: int32(kafkaacl.PermissionAny)}})
	if err != nil || len(match.GetAcls()) != 3 {
		t.Fatalf("MATCH orders: %v %v", match.GetAcls(), err)
	}
	lit, err := cb.DescribeAcls(ctx, &coordinatorv1.DescribeAclsRequest{Filter: &coordinatorv1.AclFilter{
		ResourceType: int32(kafkaacl.ResourceTopic), ResourceName: &name, PatternType: int32(kafkaacl.PatternLiteral),
		Operation: int32(kafkaacl.OpAny), PermissionType: int32(kafkaacl.PermissionAny)}})
	if err != nil || len(lit.GetAcls()) != 1 || !proto.Equal(lit.GetAcls()[0], aclBinding("orders", kafkaacl.PatternLiteral, "User:alice", kafkaacl.OpRead)) {
		t.Fatalf("LITERAL orders: %v %v", lit.GetAcls(), err)
	}
	invalid, err := cb.DescribeAcls(ctx, &coordinatorv1.DescribeAclsRequest{Filter: &coordinatorv1.AclFilter{
		ResourceType: int32(kafkaacl.ResourceUnknown), PatternType: int32(kafkaacl.PatternAny),
		Operation: int32(kafkaacl.OpAny), PermissionType: int32(kafkaacl.PermissionAny)}})
	if err != nil || invalid.GetErrorCode() != 42 {
		t.Fatalf("UNKNOWN resource type filter: %v %v", invalid, err)
	}

	alice := "User:alice"
	dresp, err := cb.DeleteAcls(ctx, &coordinatorv1.DeleteAclsRequest{Filters: []*coordinatorv1.AclFilter{
		{ResourceType: int32(kafkaacl.ResourceAny), Principal: &alice, PatternType: int32(kafkaacl.PatternAny),
			Operation: int32(kafkaacl.OpAny), PermissionType: int32(kafkaacl.PermissionAny)},
		{ResourceType: int32(kafkaacl.ResourceTopic), PatternType: int32(kafkaacl.PatternUnknown),
			Operation: int32(kafkaacl.OpAny), PermissionType: int32(kafkaacl.PermissionAny)},
		{ResourceType: int32(kafkaacl.ResourceTopic), PatternType: int32(kafkaacl.PatternPrefixed),
			Operation: int32(kafkaacl.OpAny), PermissionType: int32(kafkaacl.PermissionAny)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	r := dresp.GetResults()
	if len(r) != 3 || r[0].GetErrorCode() != 0 || len(r[0].GetDeleted()) != 2 || r[1].GetErrorCode() != 42 ||
		r[2].GetErrorCode() != 0 || len(r[2].GetDeleted()) != 0 {
		t.Fatalf("delete results %v", r)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no acls.changed announcement after DeleteAcls")
	}
	left, err := ca.DescribeAcls(ctx, &coordinatorv1.DescribeAclsRequest{})
	if err != nil || len(left.GetAcls()) != 1 || left.GetAcls()[0].GetPrincipal() != "User:*" {
		t.Fatalf("left after delete: %v %v", left.GetAcls(), err)
	}
}

func equalInt32(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
