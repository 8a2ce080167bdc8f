package handler

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	"github.com/tributary/tributary/services/kafka-gateway/internal/fake"
)

// fakeAcls is an in-memory AclService with libs/kafkaacl's filter semantics.
type fakeAcls struct {
	mu       sync.Mutex
	bindings []kafkaacl.Binding
	loads    int
}

func (f *fakeAcls) CreateAcls(_ context.Context, req *coordinatorv1.CreateAclsRequest, _ ...grpc.CallOption) (*coordinatorv1.CreateAclsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &coordinatorv1.CreateAclsResponse{}
	for _, c := range req.GetCreations() {
		b := bindingFromProto(c)
		if err := b.Validate(); err != nil {
			resp.Results = append(resp.Results, &coordinatorv1.AclResult{ErrorCode: 42, ErrorMessage: err.Error()})
			continue
		}
		f.bindings = append(f.bindings, b)
		resp.Results = append(resp.Results, &coordinatorv1.AclResult{})
	}
	return resp, nil
}

func filterOf(p *coordinatorv1.AclFilter) kafkaacl.Filter {
	if p == nil {
		return kafkaacl.Filter{ResourceType: kafkaacl.ResourceAny, PatternType: kafkaacl.PatternAny, Operation: kafkaacl.OpAny, Permission: kafkaacl.PermissionAny}
	}
	return kafkaacl.Filter{ResourceType: kafkaacl.ResourceType(p.GetResourceType()), ResourceName: p.ResourceName,
		PatternType: kafkaacl.PatternType(p.GetPatternType()), Principal: p.Principal, Host: p.Host,
		Operation: kafkaacl.Operation(p.GetOperation()), Permission: kafkaacl.Permission(p.GetPermissionType())}
}

func toProto(b kafkaacl.Binding) *coordinatorv1.AclBinding {
	return &coordinatorv1.AclBinding{ResourceType: int32(b.ResourceType), ResourceName: b.ResourceName, PatternType: int32(b.PatternType),
		Principal: b.Principal, Host: b.Host, Operation: int32(b.Operation), PermissionType: int32(b.Permission)}
}

func (f *fakeAcls) DeleteAcls(_ context.Context, req *coordinatorv1.DeleteAclsRequest, _ ...grpc.CallOption) (*coordinatorv1.DeleteAclsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &coordinatorv1.DeleteAclsResponse{}
	for _, pf := range req.GetFilters() {
		fl := filterOf(pf)
		r := &coordinatorv1.DeleteAclsFilterResult{}
		if err := fl.Validate(); err != nil {
			r.ErrorCode, r.ErrorMessage = 42, err.Error()
			resp.Results = append(resp.Results, r)
			continue
		}
		kept := f.bindings[:0]
		for _, b := range f.bindings {
			if fl.Matches(b) {
				r.Deleted = append(r.Deleted, toProto(b))
			} else {
				kept = append(kept, b)
			}
		}
		f.bindings = kept
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

func (f *fakeAcls) DescribeAcls(_ context.Context, req *coordinatorv1.DescribeAclsRequest, _ ...grpc.CallOption) (*coordinatorv1.DescribeAclsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loads++
	fl := filterOf(req.GetFilter())
	if err := fl.Validate(); err != nil {
		return &coordinatorv1.DescribeAclsResponse{ErrorCode: 42, ErrorMessage: err.Error()}, nil
	}
	resp := &coordinatorv1.DescribeAclsResponse{}
	for _, b := range f.bindings {
		if fl.Matches(b) {
			resp.Acls = append(resp.Acls, toProto(b))
		}
	}
	return resp, nil
}

func (f *fakeAcls) add(bs ...kafkaacl.Binding) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bindings = append(f.bindings, bs...)
}

const alice = "User:alice"

func grant(rt kafkaacl.ResourceType, name string, principal string, op kafkaacl.Operation) kafkaacl.Binding {
	return kafkaacl.Binding{ResourceType: rt, ResourceName: name, PatternType: kafkaacl.PatternLiteral, Principal: principal,
		Host: "*", Operation: op, Permission: kafkaacl.PermissionAllow}
}

type authEnv struct {
	*env
	acls *fakeAcls
}

// newAuthEnv is a handler with the authorizer on (super user User:admin) over fakes.
func newAuthEnv(t *testing.T) *authEnv {
	t.Helper()
	st := fake.NewStorage()
	co := fake.NewCoordinator(st)
	acls := &fakeAcls{}
	cfg := Config{NodeID: 1, ClusterID: "unit", AutoCreateTopics: true, DefaultPartitions: 1,
		Authorizer: AuthorizerConfig{Enabled: true, SuperUsers: []string{"User:admin"}, MaxAge: time.Hour}}
	brokers := []Broker{{NodeID: 1, Host: "127.0.0.1", Port: 9092}}
	h := New(cfg, Deps{Storage: st, Coordinator: co, Acls: acls, Groups: &fakeGroups{}, Brokers: func() []Broker { return brokers }, Log: zaptest.NewLogger(t)})
	return &authEnv{env: &env{h: h, st: st, co: co}, acls: acls}
}

// as handles req at version v for principal from host 10.0.0.1.
func (e *authEnv) as(t *testing.T, principal string, req kmsg.Request, v int16) kmsg.Response {
	t.Helper()
	req.SetVersion(v)
	r := &Request{Body: req, Principal: principal, ClientHost: "/10.0.0.1"}
	if req.Key() == kmsg.Produce.Int16() {
		r.Turn = e.chain.Next()
		defer r.Turn.Finish()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.h.Handle(ctx, r)
	if err != nil {
		t.Fatalf("%s v%d: %v", kmsg.NameForKey(req.Key()), v, err)
	}
	b := resp.AppendTo(nil)
	dec := req.ResponseKind()
	dec.SetVersion(v)
	if err := dec.ReadFrom(b); err != nil {
		t.Fatalf("%s v%d response does not decode: %v", kmsg.NameForKey(req.Key()), v, err)
	}
	return resp
}

func metadataReq(topics ...string) *kmsg.MetadataRequest {
	req := kmsg.NewPtrMetadataRequest()
	for _, n := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(n)
		req.Topics = append(req.Topics, rt)
	}
	return req
}

func TestAuthorizerOffServesAclAPIsAsDisabled(t *testing.T) {
	e := newEnv(t, nil)
	d := e.do(t, kmsg.NewPtrDescribeACLsRequest(), 3).(*kmsg.DescribeACLsResponse)
	if d.ErrorCode != kerr.SecurityDisabled.Code {
		t.Fatalf("DescribeAcls without authorizer: %s", code(d.ErrorCode))
	}
	c := kmsg.NewPtrCreateACLsRequest()
	c.Creations = append(c.Creations, kmsg.NewCreateACLsRequestCreation())
	if r := e.do(t, c, 3).(*kmsg.CreateACLsResponse); len(r.Results) != 1 || r.Results[0].ErrorCode != kerr.SecurityDisabled.Code {
		t.Fatalf("CreateAcls without authorizer: %+v", r.Results)
	}
	dl := kmsg.NewPtrDeleteACLsRequest()
	dl.Filters = append(dl.Filters, kmsg.NewDeleteACLsRequestFilter())
	if r := e.do(t, dl, 3).(*kmsg.DeleteACLsResponse); len(r.Results) != 1 || r.Results[0].ErrorCode != kerr.SecurityDisabled.Code {
		t.Fatalf("DeleteAcls without authorizer: %+v", r.Results)
	}
	// Everything else is served as before, authorized operations not provided.
	m := metadataReq("t")
	m.IncludeTopicAuthorizedOperations, m.AllowAutoTopicCreation = true, true
	r := e.do(t, m, 12).(*kmsg.MetadataResponse)
	if r.Topics[0].ErrorCode != 0 || r.Topics[0].AuthorizedOperations != notProvided {
		t.Fatalf("metadata without authorizer: %s ops %d", code(r.Topics[0].ErrorCode), r.Topics[0].AuthorizedOperations)
	}
}

func TestAuthorizerTopics(t *testing.T) {
	e := newAuthEnv(t)
	for _, n := range []string{"a", "b"} {
		if rt := e.createTopic(t, n, 1, nil); rt.ErrorCode != kerr.TopicAuthorizationFailed.Code {
			t.Fatalf("anonymous CreateTopics %s: %s", n, code(rt.ErrorCode))
		}
	}
	// The super user creates them (and auto-creation by alice stays refused).
	for _, n := range []string{"a", "b"} {
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = n, 1, -1
		req.Topics = append(req.Topics, rt)
		if r := e.as(t, "User:admin", req, 7).(*kmsg.CreateTopicsResponse); r.Topics[0].ErrorCode != 0 {
			t.Fatalf("admin CreateTopics %s: %s", n, code(r.Topics[0].ErrorCode))
		}
	}
	e.acls.add(grant(kafkaacl.ResourceTopic, "a", alice, kafkaacl.OpRead))
	e.h.InvalidateAcls()

	// Metadata: all topics lists only a; b named is TOPIC_AUTHORIZATION_FAILED; an
	// unknown topic alice may not create is TOPIC_AUTHORIZATION_FAILED and not created.
	all := kmsg.NewPtrMetadataRequest()
	all.IncludeTopicAuthorizedOperations = true
	mr := e.as(t, alice, all, 12).(*kmsg.MetadataResponse)
	if len(mr.Topics) != 1 || *mr.Topics[0].Topic != "a" {
		t.Fatalf("metadata all topics for alice: %+v", mr.Topics)
	}
	if want := int32(1<<kafkaacl.OpRead | 1<<kafkaacl.OpDescribe); mr.Topics[0].AuthorizedOperations != want {
		t.Fatalf("authorized operations of a: %b, want %b", mr.Topics[0].AuthorizedOperations, want)
	}
	named := metadataReq("a", "b", "new")
	named.AllowAutoTopicCreation = true
	mr = e.as(t, alice, named, 12).(*kmsg.MetadataResponse)
	if mr.Topics[0].ErrorCode != 0 || mr.Topics[1].ErrorCode != kerr.TopicAuthorizationFailed.Code ||
		mr.Topics[2].ErrorCode != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("named metadata: %s %s %s", code(mr.Topics[0].ErrorCode), code(mr.Topics[1].ErrorCode), code(mr.Topics[2].ErrorCode))
	}
	if ti, _ := e.h.getTopics(context.Background(), []string{"new"}, true); ti["new"] != nil {
		t.Fatal("metadata auto-created a topic alice may not create")
	}

	// Produce: READ does not allow WRITE.
	pr := e.as(t, alice, produceReq("a", 0, fake.Batch("x")), 9).(*kmsg.ProduceResponse)
	if c := pr.Topics[0].Partitions[0].ErrorCode; c != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("produce to a with READ only: %s", code(c))
	}
	tx := produceReq("a", 0, txnBatch())
	tx.TransactionID = kmsg.StringPtr("txn")
	pr = e.as(t, alice, tx, 9).(*kmsg.ProduceResponse)
	if c := pr.Topics[0].Partitions[0].ErrorCode; c != kerr.TransactionalIDAuthorizationFailed.Code {
		t.Fatalf("transactional produce without WRITE on the id: %s", code(c))
	}
	tx.TransactionID = nil
	pr = e.as(t, alice, tx, 9).(*kmsg.ProduceResponse)
	if c := pr.Topics[0].Partitions[0].ErrorCode; c != kerr.TransactionalIDAuthorizationFailed.Code {
		t.Fatalf("transactional batch without a transactional id: %s", code(c))
	}

	// Fetch and ListOffsets: a allowed, b refused.
	fr := kmsg.NewPtrFetchRequest()
	fr.MaxWaitMillis, fr.MaxBytes = 0, 1<<20
	for _, n := range []string{"a", "b"} {
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = n
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.PartitionMaxBytes = 1 << 20
		ft.Partitions = append(ft.Partitions, fp)
		fr.Topics = append(fr.Topics, ft)
	}
	fresp := e.as(t, alice, fr, 12).(*kmsg.FetchResponse)
	if fresp.Topics[0].Partitions[0].ErrorCode != 0 || fresp.Topics[1].Partitions[0].ErrorCode != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("fetch: a %s b %s", code(fresp.Topics[0].Partitions[0].ErrorCode), code(fresp.Topics[1].Partitions[0].ErrorCode))
	}
	lo := kmsg.NewPtrListOffsetsRequest()
	for _, n := range []string{"a", "b"} {
		lt := kmsg.NewListOffsetsRequestTopic()
		lt.Topic = n
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Timestamp = -1
		lt.Partitions = append(lt.Partitions, lp)
		lo.Topics = append(lo.Topics, lt)
	}
	lr := e.as(t, alice, lo, 7).(*kmsg.ListOffsetsResponse)
	if lr.Topics[0].Partitions[0].ErrorCode != 0 || lr.Topics[1].Partitions[0].ErrorCode != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("list offsets: a %s b %s", code(lr.Topics[0].Partitions[0].ErrorCode), code(lr.Topics[1].Partitions[0].ErrorCode))
	}

	// DeleteTopics needs DELETE, a (described) and b (not) alike.
	dt := kmsg.NewPtrDeleteTopicsRequest()
	dt.TopicNames = []string{"a", "b"}
	dr := e.as(t, alice, dt, 5).(*kmsg.DeleteTopicsResponse)
	if dr.Topics[0].ErrorCode != kerr.TopicAuthorizationFailed.Code || dr.Topics[1].ErrorCode != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("delete topics: a %s b %s", code(dr.Topics[0].ErrorCode), code(dr.Topics[1].ErrorCode))
	}

	// By id, b is refused without its name.
	am := e.as(t, "User:admin", metadataReq("b"), 12).(*kmsg.MetadataResponse)
	dt = kmsg.NewPtrDeleteTopicsRequest()
	dtt := kmsg.NewDeleteTopicsRequestTopic()
	dtt.TopicID = am.Topics[0].TopicID
	dt.Topics = append(dt.Topics, dtt)
	dr = e.as(t, alice, dt, 6).(*kmsg.DeleteTopicsResponse)
	if dr.Topics[0].ErrorCode != kerr.TopicAuthorizationFailed.Code || dr.Topics[0].Topic != nil {
		t.Fatalf("delete b by id: %s, name %v", code(dr.Topics[0].ErrorCode), dr.Topics[0].Topic)
	}

	// Configs: READ gives no DESCRIBE_CONFIGS; broker configs need it on the cluster.
	dc := kmsg.NewPtrDescribeConfigsRequest()
	for _, rt := range []kmsg.ConfigResourceType{resourceTopic, resourceBroker} {
		res := kmsg.NewDescribeConfigsRequestResource()
		res.ResourceType, res.ResourceName = rt, "a"
		if rt == resourceBroker {
			res.ResourceName = "1"
		}
		dc.Resources = append(dc.Resources, res)
	}
	dcr := e.as(t, alice, dc, 4).(*kmsg.DescribeConfigsResponse)
	if dcr.Resources[0].ErrorCode != kerr.TopicAuthorizationFailed.Code || dcr.Resources[1].ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("describe configs: %s %s", code(dcr.Resources[0].ErrorCode), code(dcr.Resources[1].ErrorCode))
	}

	// DescribeCluster answers everyone, its authorized operations 0 without DESCRIBE on
	// the cluster; InitProducerId (idempotent) needs
	// IDEMPOTENT_WRITE on the cluster or WRITE on some topic.
	cl := kmsg.NewPtrDescribeClusterRequest()
	cl.IncludeClusterAuthorizedOperations = true
	if r := e.as(t, alice, cl, 0).(*kmsg.DescribeClusterResponse); r.ErrorCode != 0 || len(r.Brokers) != 1 || r.ClusterAuthorizedOperations != 0 {
		t.Fatalf("describe cluster without DESCRIBE: %s, %d brokers, ops %b", code(r.ErrorCode), len(r.Brokers), r.ClusterAuthorizedOperations)
	}
	ip := kmsg.NewPtrInitProducerIDRequest()
	if r := e.as(t, alice, ip, 4).(*kmsg.InitProducerIDResponse); r.ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("idempotent init producer id without write: %s", code(r.ErrorCode))
	}
	e.acls.add(grant(kafkaacl.ResourceTopic, "a", alice, kafkaacl.OpWrite), grant(kafkaacl.ResourceCluster, kafkaacl.ClusterName, alice, kafkaacl.OpDescribe))
	e.h.InvalidateAcls()
	if r := e.as(t, alice, ip, 4).(*kmsg.InitProducerIDResponse); r.ErrorCode != 0 {
		t.Fatalf("idempotent init producer id with write on a: %s", code(r.ErrorCode))
	}
	if r := e.as(t, alice, cl, 0).(*kmsg.DescribeClusterResponse); r.ErrorCode != 0 || r.ClusterAuthorizedOperations != 1<<kafkaacl.OpDescribe {
		t.Fatalf("describe cluster with describe: %s ops %b", code(r.ErrorCode), r.ClusterAuthorizedOperations)
	}
	// WRITE without CREATE: an unknown topic is not created.
	e.acls.add(grant(kafkaacl.ResourceTopic, "nocreate", alice, kafkaacl.OpWrite))
	e.h.InvalidateAcls()
	pr = e.as(t, alice, produceReq("nocreate", 0, fake.Batch("x")), 9).(*kmsg.ProduceResponse)
	if c := pr.Topics[0].Partitions[0].ErrorCode; c != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("produce to an unknown topic without CREATE: %s", code(c))
	}
	if ti, _ := e.h.getTopics(context.Background(), []string{"nocreate"}, true); ti["nocreate"] != nil {
		t.Fatal("produce auto-created a topic alice may not create")
	}

	pr = e.as(t, alice, produceReq("a", 0, fake.Batch("x")), 9).(*kmsg.ProduceResponse)
	if c := pr.Topics[0].Partitions[0].ErrorCode; c != 0 {
		t.Fatalf("produce to a with WRITE: %s", code(c))
	}
}

func TestAuthorizerGroups(t *testing.T) {
	e := newAuthEnv(t)
	e.acls.add(grant(kafkaacl.ResourceGroup, "mine", alice, kafkaacl.OpRead))

	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorKeys = []string{"mine", "theirs"}
	fr := e.as(t, alice, fc, 4).(*kmsg.FindCoordinatorResponse)
	if fr.Coordinators[0].ErrorCode != 0 || fr.Coordinators[1].ErrorCode != kerr.GroupAuthorizationFailed.Code {
		t.Fatalf("find coordinator: %s %s", code(fr.Coordinators[0].ErrorCode), code(fr.Coordinators[1].ErrorCode))
	}
	fc = kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorType, fc.CoordinatorKeys = 1, []string{"txn"}
	if r := e.as(t, alice, fc, 4).(*kmsg.FindCoordinatorResponse); r.Coordinators[0].ErrorCode != kerr.TransactionalIDAuthorizationFailed.Code {
		t.Fatalf("find transaction coordinator: %s", code(r.Coordinators[0].ErrorCode))
	}
	jg := kmsg.NewPtrJoinGroupRequest()
	jg.Group, jg.ProtocolType, jg.SessionTimeoutMillis, jg.RebalanceTimeoutMillis = "theirs", "consumer", 10000, 10000
	if r := e.as(t, alice, jg, 9).(*kmsg.JoinGroupResponse); r.ErrorCode != kerr.GroupAuthorizationFailed.Code {
		t.Fatalf("join a group without READ: %s", code(r.ErrorCode))
	}
	oc := kmsg.NewPtrOffsetCommitRequest()
	oc.Group, oc.Generation = "mine", -1
	ot := kmsg.NewOffsetCommitRequestTopic()
	ot.Topic = "secret"
	ot.Partitions = append(ot.Partitions, kmsg.NewOffsetCommitRequestTopicPartition())
	oc.Topics = append(oc.Topics, ot)
	if r := e.as(t, alice, oc, 8).(*kmsg.OffsetCommitResponse); r.Topics[0].Partitions[0].ErrorCode != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("commit to a topic without READ: %s", code(r.Topics[0].Partitions[0].ErrorCode))
	}
	oc.Group = "theirs"
	if r := e.as(t, alice, oc, 8).(*kmsg.OffsetCommitResponse); r.Topics[0].Partitions[0].ErrorCode != kerr.GroupAuthorizationFailed.Code {
		t.Fatalf("commit to a group without READ: %s", code(r.Topics[0].Partitions[0].ErrorCode))
	}
	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.Groups, dg.IncludeAuthorizedOperations = []string{"mine", "theirs"}, true
	dr := e.as(t, alice, dg, 5).(*kmsg.DescribeGroupsResponse)
	if dr.Groups[0].ErrorCode != 0 || dr.Groups[1].ErrorCode != kerr.GroupAuthorizationFailed.Code {
		t.Fatalf("describe groups: %s %s", code(dr.Groups[0].ErrorCode), code(dr.Groups[1].ErrorCode))
	}
	if want := int32(1<<kafkaacl.OpRead | 1<<kafkaacl.OpDescribe); dr.Groups[0].AuthorizedOperations != want {
		t.Fatalf("group authorized operations %b, want %b", dr.Groups[0].AuthorizedOperations, want)
	}
	del := kmsg.NewPtrDeleteGroupsRequest()
	del.Groups = []string{"mine"}
	if r := e.as(t, alice, del, 2).(*kmsg.DeleteGroupsResponse); r.Groups[0].ErrorCode != kerr.GroupAuthorizationFailed.Code {
		t.Fatalf("delete a group without DELETE: %s", code(r.Groups[0].ErrorCode))
	}
}

func TestAclAPIs(t *testing.T) {
	e := newAuthEnv(t)
	create := kmsg.NewPtrCreateACLsRequest()
	c := kmsg.NewCreateACLsRequestCreation()
	c.ResourceType, c.ResourceName, c.ResourcePatternType = kmsg.ACLResourceTypeTopic, "logs-", kmsg.ACLResourcePatternTypePrefixed
	c.Principal, c.Host, c.Operation, c.PermissionType = alice, "*", kmsg.ACLOperationRead, kmsg.ACLPermissionTypeAllow
	bad := c
	bad.ResourcePatternType = kmsg.ACLResourcePatternTypeMatch
	create.Creations = []kmsg.CreateACLsRequestCreation{c, bad}

	if r := e.as(t, alice, create, 3).(*kmsg.CreateACLsResponse); r.Results[0].ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("create acls without ALTER on the cluster: %s", code(r.Results[0].ErrorCode))
	}
	if r := e.as(t, alice, kmsg.NewPtrDescribeACLsRequest(), 3).(*kmsg.DescribeACLsResponse); r.ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("describe acls without DESCRIBE on the cluster: %s", code(r.ErrorCode))
	}
	r := e.as(t, "User:admin", create, 3).(*kmsg.CreateACLsResponse)
	if r.Results[0].ErrorCode != 0 || r.Results[1].ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("create acls: %s %s", code(r.Results[0].ErrorCode), code(r.Results[1].ErrorCode))
	}
	// The creating replica applies its own change before answering.
	fr := kmsg.NewPtrFetchRequest()
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "logs-x"
	ft.Partitions = append(ft.Partitions, kmsg.NewFetchRequestTopicPartition())
	fr.Topics = append(fr.Topics, ft)
	if r := e.as(t, alice, fr, 12).(*kmsg.FetchResponse); r.Topics[0].Partitions[0].ErrorCode == kerr.TopicAuthorizationFailed.Code {
		t.Fatal("acl created on this replica not applied")
	}

	describe := kmsg.NewPtrDescribeACLsRequest()
	describe.ResourceType, describe.ResourceName = kmsg.ACLResourceTypeTopic, kmsg.StringPtr("logs-x")
	describe.ResourcePatternType, describe.Operation, describe.PermissionType = kmsg.ACLResourcePatternTypeMatch, kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
	d := e.as(t, "User:admin", describe, 3).(*kmsg.DescribeACLsResponse)
	if d.ErrorCode != 0 || len(d.Resources) != 1 || d.Resources[0].ResourceName != "logs-" || len(d.Resources[0].ACLs) != 1 {
		t.Fatalf("describe MATCH logs-x: %s %+v", code(d.ErrorCode), d.Resources)
	}
	describe.ResourceType = kmsg.ACLResourceTypeUnknown
	if d := e.as(t, "User:admin", describe, 3).(*kmsg.DescribeACLsResponse); d.ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("describe with an UNKNOWN resource type: %s", code(d.ErrorCode))
	}

	del := kmsg.NewPtrDeleteACLsRequest()
	f := kmsg.NewDeleteACLsRequestFilter()
	f.ResourceType, f.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny
	f.Principal, f.Operation, f.PermissionType = kmsg.StringPtr(alice), kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
	del.Filters = append(del.Filters, f)
	dr := e.as(t, "User:admin", del, 3).(*kmsg.DeleteACLsResponse)
	if dr.Results[0].ErrorCode != 0 || len(dr.Results[0].MatchingACLs) != 1 || dr.Results[0].MatchingACLs[0].ResourceName != "logs-" {
		t.Fatalf("delete acls: %+v", dr.Results)
	}
	if r := e.as(t, alice, fr, 12).(*kmsg.FetchResponse); r.Topics[0].Partitions[0].ErrorCode != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("acl deleted on this replica still applied: %s", code(r.Topics[0].Partitions[0].ErrorCode))
	}
}

// TestAuthorizerCacheBound: an invalidation reloads before the next decision; a change
// the replica did not hear of is applied once the cached bindings are past their bound
// (reloaded in the background, the stale ones used meanwhile).
func TestAuthorizerCacheBound(t *testing.T) {
	acls := &fakeAcls{}
	a := newAuthorizer(AuthorizerConfig{Enabled: true, MaxAge: time.Hour}, acls, zaptest.NewLogger(t))
	ctx := context.Background()
	if a.current(ctx).Len() != 0 {
		t.Fatal("bindings from nowhere")
	}
	acls.add(grant(kafkaacl.ResourceTopic, "a", alice, kafkaacl.OpRead))
	if a.current(ctx).Len() != 0 {
		t.Fatal("reloaded within the bound without being told")
	}
	a.gen.Add(1) // what invalidate does, without its background load
	if a.current(ctx).Len() != 1 {
		t.Fatal("not reloaded after an invalidation")
	}
	acls.add(grant(kafkaacl.ResourceTopic, "b", alice, kafkaacl.OpRead))
	s := a.snap.Load()
	a.snap.Store(&aclSnapshot{set: s.set, gen: s.gen, expires: time.Now().Add(-time.Nanosecond)})
	if n := a.current(ctx).Len(); n != 1 {
		t.Fatalf("past the bound: %d bindings, want the 1 held while the reload runs", n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for a.current(ctx).Len() != 2 {
		if time.Now().After(deadline) {
			t.Fatal("not reloaded past the bound")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAuthorizerHostsAndNoACL: a binding for another host does not apply, a DENY for
// the client's host wins over an ALLOW for every host, and allow-if-no-acl-found
// allows only resources no binding names.
func TestAuthorizerHostsAndNoACL(t *testing.T) {
	e := newAuthEnv(t)
	e.h.auth.rules.AllowIfNoACL = true
	for _, n := range []string{"a", "b", "c"} {
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = n, 1, -1
		req.Topics = append(req.Topics, rt)
		if r := e.as(t, "User:admin", req, 7).(*kmsg.CreateTopicsResponse); r.Topics[0].ErrorCode != 0 {
			t.Fatalf("admin CreateTopics %s: %s", n, code(r.Topics[0].ErrorCode))
		}
	}
	other := grant(kafkaacl.ResourceTopic, "a", alice, kafkaacl.OpDescribe)
	other.Host = "10.0.0.9"
	denyHere := grant(kafkaacl.ResourceTopic, "b", alice, kafkaacl.OpDescribe)
	denyHere.Host, denyHere.Permission = "10.0.0.1", kafkaacl.PermissionDeny
	e.acls.add(other, denyHere, grant(kafkaacl.ResourceTopic, "b", kafkaacl.WildcardPrincipal, kafkaacl.OpDescribe))
	e.h.InvalidateAcls()
	mr := e.as(t, alice, metadataReq("a", "b", "c"), 12).(*kmsg.MetadataResponse)
	for i, want := range []int16{kerr.TopicAuthorizationFailed.Code, kerr.TopicAuthorizationFailed.Code, 0} {
		if mr.Topics[i].ErrorCode != want {
			t.Errorf("metadata %s from 10.0.0.1: %s, want %s", *mr.Topics[i].Topic, code(mr.Topics[i].ErrorCode), code(want))
		}
	}
	// bob is not denied on b: the wildcard principal's ALLOW applies from any host.
	mr = e.as(t, "User:bob", metadataReq("b"), 12).(*kmsg.MetadataResponse)
	if mr.Topics[0].ErrorCode != 0 {
		t.Errorf("metadata b for bob: %s", code(mr.Topics[0].ErrorCode))
	}
}

// TestAuthorizerScramCredentials: KIP-554's APIs need DESCRIBE / ALTER on the cluster.
func TestAuthorizerScramCredentials(t *testing.T) {
	e := newAuthEnv(t)
	d := kmsg.NewPtrDescribeUserSCRAMCredentialsRequest()
	if r := e.as(t, alice, d, 0).(*kmsg.DescribeUserSCRAMCredentialsResponse); r.ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("describe scram credentials without DESCRIBE on the cluster: %s", code(r.ErrorCode))
	}
	a := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	del := kmsg.NewAlterUserSCRAMCredentialsRequestDeletion()
	del.Name, del.Mechanism = "bob", 2
	up := kmsg.NewAlterUserSCRAMCredentialsRequestUpsertion()
	up.Name, up.Mechanism, up.Iterations, up.Salt, up.SaltedPassword = "carol", 2, 4096, []byte("salt"), []byte("salted")
	a.Deletions, a.Upsertions = append(a.Deletions, del), append(a.Upsertions, up)
	r := e.as(t, alice, a, 0).(*kmsg.AlterUserSCRAMCredentialsResponse)
	if len(r.Results) != 2 || r.Results[0].ErrorCode != kerr.ClusterAuthorizationFailed.Code || r.Results[1].ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("alter scram credentials without ALTER on the cluster: %+v", r.Results)
	}
}
