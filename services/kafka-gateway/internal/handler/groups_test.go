package handler

import (
	"context"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	"github.com/tributary/tributary/services/kafka-gateway/internal/fake"
)

// fakeGroups answers group calls with canned responses and records the requests.
type fakeGroups struct {
	mu   sync.Mutex
	fail error
	last any

	join     *coordinatorv1.JoinGroupResponse
	describe *coordinatorv1.DescribeGroupsResponse
	fetch    *coordinatorv1.OffsetFetchResponse
}

func (f *fakeGroups) record(req any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last = req
	return f.fail
}

func (f *fakeGroups) JoinGroup(_ context.Context, r *coordinatorv1.JoinGroupRequest, _ ...grpc.CallOption) (*coordinatorv1.JoinGroupResponse, error) {
	if err := f.record(r); err != nil {
		return nil, err
	}
	if f.join != nil {
		return f.join, nil
	}
	return &coordinatorv1.JoinGroupResponse{GenerationId: 1, ProtocolType: "consumer", ProtocolName: "range", Leader: "m1", MemberId: "m1",
		Members: []*coordinatorv1.JoinGroupMember{{MemberId: "m1", Metadata: []byte{1}}}}, nil
}

func (f *fakeGroups) SyncGroup(_ context.Context, r *coordinatorv1.SyncGroupRequest, _ ...grpc.CallOption) (*coordinatorv1.SyncGroupResponse, error) {
	if err := f.record(r); err != nil {
		return nil, err
	}
	return &coordinatorv1.SyncGroupResponse{ProtocolType: "consumer", ProtocolName: "range", Assignment: []byte{9}}, nil
}

func (f *fakeGroups) Heartbeat(_ context.Context, r *coordinatorv1.HeartbeatRequest, _ ...grpc.CallOption) (*coordinatorv1.HeartbeatResponse, error) {
	if err := f.record(r); err != nil {
		return nil, err
	}
	return &coordinatorv1.HeartbeatResponse{ErrorCode: int32(kerr.RebalanceInProgress.Code)}, nil
}

func (f *fakeGroups) LeaveGroup(_ context.Context, r *coordinatorv1.LeaveGroupRequest, _ ...grpc.CallOption) (*coordinatorv1.LeaveGroupResponse, error) {
	if err := f.record(r); err != nil {
		return nil, err
	}
	out := &coordinatorv1.LeaveGroupResponse{}
	for _, m := range r.GetMembers() {
		out.Members = append(out.Members, &coordinatorv1.LeftMember{MemberId: m.GetMemberId(), GroupInstanceId: m.GroupInstanceId,
			ErrorCode: int32(kerr.UnknownMemberID.Code)})
	}
	return out, nil
}

func (f *fakeGroups) OffsetCommit(_ context.Context, r *coordinatorv1.OffsetCommitRequest, _ ...grpc.CallOption) (*coordinatorv1.OffsetCommitResponse, error) {
	if err := f.record(r); err != nil {
		return nil, err
	}
	out := &coordinatorv1.OffsetCommitResponse{}
	for _, t := range r.GetTopics() {
		rt := &coordinatorv1.TopicPartitionResults{Name: t.GetName()}
		for _, p := range t.GetPartitions() {
			rt.Partitions = append(rt.Partitions, &coordinatorv1.PartitionResult{Partition: p.GetPartition(), ErrorCode: int32(kerr.IllegalGeneration.Code)})
		}
		out.Topics = append(out.Topics, rt)
	}
	return out, nil
}

func (f *fakeGroups) OffsetFetch(_ context.Context, r *coordinatorv1.OffsetFetchRequest, _ ...grpc.CallOption) (*coordinatorv1.OffsetFetchResponse, error) {
	if err := f.record(r); err != nil {
		return nil, err
	}
	if f.fetch != nil {
		return f.fetch, nil
	}
	out := &coordinatorv1.OffsetFetchResponse{}
	for _, g := range r.GetGroups() {
		fg := &coordinatorv1.FetchedGroup{GroupId: g.GetGroupId()}
		for _, t := range g.GetTopics() {
			ft := &coordinatorv1.FetchedTopic{Name: t.GetName()}
			for _, p := range t.GetPartitions() {
				ft.Partitions = append(ft.Partitions, &coordinatorv1.FetchedPartition{Partition: p, CommittedOffset: 42, CommittedLeaderEpoch: 1, Metadata: "md"})
			}
			fg.Topics = append(fg.Topics, ft)
		}
		out.Groups = append(out.Groups, fg)
	}
	return out, nil
}

func (f *fakeGroups) DescribeGroups(_ context.Context, r *coordinatorv1.DescribeGroupsRequest, _ ...grpc.CallOption) (*coordinatorv1.DescribeGroupsResponse, error) {
	if err := f.record(r); err != nil {
		return nil, err
	}
	if f.describe != nil {
		return f.describe, nil
	}
	out := &coordinatorv1.DescribeGroupsResponse{}
	for _, id := range r.GetGroupIds() {
		out.Groups = append(out.Groups, &coordinatorv1.DescribedGroup{GroupId: id, State: "Dead"})
	}
	return out, nil
}

func (f *fakeGroups) ListGroups(_ context.Context, r *coordinatorv1.ListGroupsRequest, _ ...grpc.CallOption) (*coordinatorv1.ListGroupsResponse, error) {
	if err := f.record(r); err != nil {
		return nil, err
	}
	return &coordinatorv1.ListGroupsResponse{Groups: []*coordinatorv1.ListedGroup{{GroupId: "g", ProtocolType: "consumer", State: "Stable"}}}, nil
}

func (f *fakeGroups) DeleteGroups(_ context.Context, r *coordinatorv1.DeleteGroupsRequest, _ ...grpc.CallOption) (*coordinatorv1.DeleteGroupsResponse, error) {
	if err := f.record(r); err != nil {
		return nil, err
	}
	out := &coordinatorv1.DeleteGroupsResponse{}
	for _, id := range r.GetGroupIds() {
		out.Results = append(out.Results, &coordinatorv1.DeletedGroup{GroupId: id, ErrorCode: int32(kerr.NonEmptyGroup.Code)})
	}
	return out, nil
}

func (f *fakeGroups) OffsetDelete(_ context.Context, r *coordinatorv1.OffsetDeleteRequest, _ ...grpc.CallOption) (*coordinatorv1.OffsetDeleteResponse, error) {
	if err := f.record(r); err != nil {
		return nil, err
	}
	out := &coordinatorv1.OffsetDeleteResponse{}
	for _, t := range r.GetTopics() {
		rt := &coordinatorv1.TopicPartitionResults{Name: t.GetName()}
		for _, p := range t.GetPartitions() {
			rt.Partitions = append(rt.Partitions, &coordinatorv1.PartitionResult{Partition: p, ErrorCode: int32(kerr.GroupSubscribedToTopic.Code)})
		}
		out.Topics = append(out.Topics, rt)
	}
	return out, nil
}

func (f *fakeGroups) GetCommittedOffsets(context.Context, *coordinatorv1.GetCommittedOffsetsRequest, ...grpc.CallOption) (*coordinatorv1.GetCommittedOffsetsResponse, error) {
	return &coordinatorv1.GetCommittedOffsetsResponse{}, nil
}

func newGroupEnv(t *testing.T) (*env, *fakeGroups) {
	t.Helper()
	st := fake.NewStorage()
	co := fake.NewCoordinator(st)
	fg := &fakeGroups{}
	brokers := []Broker{{NodeID: 1, Host: "gw1.example", Port: 9092}, {NodeID: 2, Host: "gw2.example", Port: 9093}}
	h := New(Config{NodeID: 2, ClusterID: "unit", DefaultPartitions: 1},
		Deps{Storage: st, Coordinator: co, Groups: fg, Brokers: func() []Broker { return brokers }, Log: zaptest.NewLogger(t)})
	return &env{h: h, st: st, co: co}, fg
}

func commitRequest(group, topic string, partitions ...int32) *kmsg.OffsetCommitRequest {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation, req.MemberID = group, 3, "m1"
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = topic
	for _, p := range partitions {
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = p, 10
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	return req
}

// TestGroupAPIsEveryVersion sends every group API at every advertised version: each
// answer encodes at that version (e.do checks) and carries the coordinator's outcome.
func TestGroupAPIsEveryVersion(t *testing.T) {
	e, fg := newGroupEnv(t)
	if r := e.createTopic(t, "t", 2, nil); r.ErrorCode != 0 {
		t.Fatalf("create topic: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	for v := int16(0); v <= 6; v++ {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorKey, req.CoordinatorKeys = "g", []string{"g", "txn"}
		resp := e.do(t, req, v).(*kmsg.FindCoordinatorResponse)
		node, host := resp.NodeID, resp.Host
		if v >= 4 {
			if len(resp.Coordinators) != 2 {
				t.Fatalf("FindCoordinator v%d: %d coordinators", v, len(resp.Coordinators))
			}
			node, host = resp.Coordinators[1].NodeID, resp.Coordinators[1].Host
		}
		if node != 2 || host != "gw2.example" {
			t.Errorf("FindCoordinator v%d answered node %d %s, want this replica (2)", v, node, host)
		}
	}
	for v := int16(2); v <= 9; v++ {
		req := kmsg.NewPtrJoinGroupRequest()
		req.Group, req.SessionTimeoutMillis, req.RebalanceTimeoutMillis, req.ProtocolType = "g", 10000, 10000, "consumer"
		req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{1}}}
		resp := e.do(t, req, v).(*kmsg.JoinGroupResponse)
		if resp.ErrorCode != 0 || resp.Generation != 1 || resp.LeaderID != "m1" || len(resp.Members) != 1 || *resp.Protocol != "range" {
			t.Errorf("JoinGroup v%d: %+v", v, resp)
		}
		if got := fg.last.(*coordinatorv1.JoinGroupRequest).GetRequireKnownMemberId(); got != (v >= 4) {
			t.Errorf("JoinGroup v%d: require known member id %v", v, got)
		}
	}
	for v := int16(0); v <= 5; v++ {
		req := kmsg.NewPtrSyncGroupRequest()
		req.Group, req.Generation, req.MemberID = "g", 1, "m1"
		resp := e.do(t, req, v).(*kmsg.SyncGroupResponse)
		if resp.ErrorCode != 0 || len(resp.MemberAssignment) != 1 {
			t.Errorf("SyncGroup v%d: %+v", v, resp)
		}
	}
	for v := int16(0); v <= 4; v++ {
		req := kmsg.NewPtrHeartbeatRequest()
		req.Group, req.Generation, req.MemberID = "g", 1, "m1"
		if resp := e.do(t, req, v).(*kmsg.HeartbeatResponse); resp.ErrorCode != kerr.RebalanceInProgress.Code {
			t.Errorf("Heartbeat v%d: %v", v, kerr.ErrorForCode(resp.ErrorCode))
		}
	}
	for v := int16(0); v <= 5; v++ {
		req := kmsg.NewPtrLeaveGroupRequest()
		req.Group, req.MemberID = "g", "m1"
		req.Members = []kmsg.LeaveGroupRequestMember{{MemberID: "m1"}}
		resp := e.do(t, req, v).(*kmsg.LeaveGroupResponse)
		code := resp.ErrorCode
		if v >= 3 {
			code = resp.Members[0].ErrorCode
		}
		if code != kerr.UnknownMemberID.Code {
			t.Errorf("LeaveGroup v%d: %v", v, kerr.ErrorForCode(code))
		}
	}
	for v := int16(2); v <= 9; v++ {
		resp := e.do(t, commitRequest("g", "t", 0, 5), v).(*kmsg.OffsetCommitResponse)
		ps := resp.Topics[0].Partitions
		if ps[0].ErrorCode != kerr.IllegalGeneration.Code || ps[1].ErrorCode != kerr.UnknownTopicOrPartition.Code {
			t.Errorf("OffsetCommit v%d: %v %v", v, kerr.ErrorForCode(ps[0].ErrorCode), kerr.ErrorForCode(ps[1].ErrorCode))
		}
	}
	for v := int16(1); v <= 9; v++ {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Group = "g"
		req.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "t", Partitions: []int32{0}}}
		req.Groups = []kmsg.OffsetFetchRequestGroup{{Group: "g", Topics: []kmsg.OffsetFetchRequestGroupTopic{{Topic: "t", Partitions: []int32{0}}}}}
		resp := e.do(t, req, v).(*kmsg.OffsetFetchResponse)
		var off int64
		if v >= 8 {
			off = resp.Groups[0].Topics[0].Partitions[0].Offset
		} else {
			off = resp.Topics[0].Partitions[0].Offset
		}
		if off != 42 {
			t.Errorf("OffsetFetch v%d: offset %d", v, off)
		}
	}
	for v := int16(0); v <= 6; v++ {
		req := kmsg.NewPtrDescribeGroupsRequest()
		req.Groups = []string{"gone"}
		resp := e.do(t, req, v).(*kmsg.DescribeGroupsResponse)
		want := int16(0)
		if v >= 6 {
			want = kerr.GroupIDNotFound.Code
		}
		if g := resp.Groups[0]; g.ErrorCode != want || g.State != "Dead" {
			t.Errorf("DescribeGroups v%d unknown group: %v %s", v, kerr.ErrorForCode(g.ErrorCode), g.State)
		}
	}
	for v := int16(0); v <= 5; v++ {
		resp := e.do(t, kmsg.NewPtrListGroupsRequest(), v).(*kmsg.ListGroupsResponse)
		if len(resp.Groups) != 1 || resp.Groups[0].Group != "g" {
			t.Errorf("ListGroups v%d: %+v", v, resp.Groups)
		}
	}
	req := kmsg.NewPtrListGroupsRequest()
	req.TypesFilter = []string{"consumer"}
	resp := e.do(t, req, 5).(*kmsg.ListGroupsResponse)
	fg.mu.Lock()
	lr, _ := fg.last.(*coordinatorv1.ListGroupsRequest)
	fg.mu.Unlock()
	if lr == nil || len(lr.GetTypesFilter()) != 1 || lr.GetTypesFilter()[0] != "consumer" {
		t.Errorf("ListGroups v5 type filter not passed to the coordinator: %+v", lr)
	}
	if len(resp.Groups) != 1 || resp.Groups[0].GroupType != "classic" {
		t.Errorf("ListGroups v5 group type of a group the coordinator gave no type: %+v", resp.Groups)
	}
	for v := int16(0); v <= 2; v++ {
		req := kmsg.NewPtrDeleteGroupsRequest()
		req.Groups = []string{"g"}
		if resp := e.do(t, req, v).(*kmsg.DeleteGroupsResponse); resp.Groups[0].ErrorCode != kerr.NonEmptyGroup.Code {
			t.Errorf("DeleteGroups v%d: %v", v, kerr.ErrorForCode(resp.Groups[0].ErrorCode))
		}
	}
	od := kmsg.NewPtrOffsetDeleteRequest()
	od.Group = "g"
	od.Topics = []kmsg.OffsetDeleteRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}}}
	if resp := e.do(t, od, 0).(*kmsg.OffsetDeleteResponse); resp.Topics[0].Partitions[0].ErrorCode != kerr.GroupSubscribedToTopic.Code {
		t.Errorf("OffsetDelete: %+v", resp)
	}
}

func TestGroupCallsWhenCoordinatorDown(t *testing.T) {
	e, fg := newGroupEnv(t)
	if r := e.createTopic(t, "t", 1, nil); r.ErrorCode != 0 {
		t.Fatalf("create topic: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	fg.fail = status503()
	want := kerr.CoordinatorNotAvailable.Code
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group = "g"
	if r := e.do(t, hb, 4).(*kmsg.HeartbeatResponse); r.ErrorCode != want {
		t.Errorf("Heartbeat: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	jg := kmsg.NewPtrJoinGroupRequest()
	jg.Group, jg.SessionTimeoutMillis = "g", 10000
	if r := e.do(t, jg, 5).(*kmsg.JoinGroupResponse); r.ErrorCode != want {
		t.Errorf("JoinGroup: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	if r := e.do(t, commitRequest("g", "t", 0), 8).(*kmsg.OffsetCommitResponse); r.Topics[0].Partitions[0].ErrorCode != want {
		t.Errorf("OffsetCommit: %v", kerr.ErrorForCode(r.Topics[0].Partitions[0].ErrorCode))
	}
	// Empty group id is refused before any call.
	if r := e.do(t, commitRequest("", "t", 0), 8).(*kmsg.OffsetCommitResponse); r.Topics[0].Partitions[0].ErrorCode != kerr.InvalidGroupID.Code {
		t.Errorf("OffsetCommit empty group: %v", kerr.ErrorForCode(r.Topics[0].Partitions[0].ErrorCode))
	}
	of := kmsg.NewPtrOffsetFetchRequest()
	of.Group = "g"
	of.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "t", Partitions: []int32{0}}}
	r := e.do(t, of, 1).(*kmsg.OffsetFetchResponse)
	if p := r.Topics[0].Partitions[0]; p.ErrorCode != want || p.Offset != -1 {
		t.Errorf("OffsetFetch v1 (no top-level error): %+v", p)
	}
}

func TestJoinGroupStaticLeaderRejoin(t *testing.T) {
	e, fg := newGroupEnv(t)
	fg.join = &coordinatorv1.JoinGroupResponse{GenerationId: 4, ProtocolType: "consumer", ProtocolName: "range", Leader: "new", MemberId: "new",
		SkipAssignment: true, Members: []*coordinatorv1.JoinGroupMember{{MemberId: "new"}, {MemberId: "other"}}}
	req := kmsg.NewPtrJoinGroupRequest()
	req.Group, req.SessionTimeoutMillis, req.ProtocolType = "g", 10000, "consumer"
	r := e.do(t, req, 9).(*kmsg.JoinGroupResponse)
	if !r.SkipAssignment || r.LeaderID != "new" || len(r.Members) != 2 {
		t.Errorf("v9 static leader rejoin: %+v", r)
	}
	r = e.do(t, req, 5).(*kmsg.JoinGroupResponse)
	if r.LeaderID == r.MemberID || len(r.Members) != 0 {
		t.Errorf("v5 static leader rejoin must look like a follower: %+v", r)
	}
}
