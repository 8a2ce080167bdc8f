package e2e

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Test848Coexistence drives classic and KIP-848 groups with raw requests through one
// gateway: a classic group with a member refuses a consumer member
// (GROUP_ID_NOT_FOUND); once empty it converts, keeping its offsets; a JoinGroup to
// the consumer group is INCONSISTENT_GROUP_PROTOCOL; OffsetCommit v9 and OffsetFetch
// v9 check the member epoch; ListGroups v5 filters by type; DescribeGroups does not
// describe a consumer group; and once the consumer member leaves, a JoinGroup turns
// the group classic again.
func Test848Coexistence(t *testing.T) {
	s := sharedStack(t)
	cl := newClient(t, s.KafkaAddrs)
	adm := newAdmin(t, s.KafkaAddrs)
	topic, group := topicName("co848"), topicName("cogrp")
	createTopic(t, adm, topic, 2, nil)
	ctx := ctxT(t, 2*time.Minute)
	ids := waitTopic(t, adm, topic, 2)

	join := func(memberID string) *kmsg.JoinGroupResponse {
		t.Helper()
		req := kmsg.NewPtrJoinGroupRequest()
		req.Group, req.MemberID, req.ProtocolType = group, memberID, "consumer"
		req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 30000, 5000
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name, p.Metadata = "range", (&kmsg.ConsumerMemberMetadata{Topics: []string{topic}}).AppendTo(nil)
		req.Protocols = append(req.Protocols, p)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("JoinGroup: %v", err)
		}
		return resp
	}
	heartbeat := func(memberID string, epoch int32, owned []int32) *kmsg.ConsumerGroupHeartbeatResponse {
		t.Helper()
		req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		req.Group, req.MemberID, req.MemberEpoch = group, memberID, epoch
		if epoch == 0 {
			req.RebalanceTimeoutMillis, req.SubscribedTopicNames = 5000, []string{topic}
		}
		if owned != nil || epoch == 0 {
			req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
			if len(owned) > 0 {
				tp := kmsg.NewConsumerGroupHeartbeatRequestTopic()
				tp.TopicID, tp.Partitions = ids.ID, owned
				req.Topics = append(req.Topics, tp)
			}
		}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("ConsumerGroupHeartbeat: %v", err)
		}
		return resp
	}
	commit := func(memberID string, epoch int32, offset int64) int16 {
		t.Helper()
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Version = 9
		req.Group, req.MemberID, req.Generation = group, memberID, epoch
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = 0, offset
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("OffsetCommit: %v", err)
		}
		return resp.Topics[0].Partitions[0].ErrorCode
	}
	fetchCode := func(memberID string, epoch int32) (int16, int64) {
		t.Helper()
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Version = 9
		rg := kmsg.NewOffsetFetchRequestGroup()
		rg.Group, rg.MemberID, rg.MemberEpoch = group, &memberID, epoch
		rt := kmsg.NewOffsetFetchRequestGroupTopic()
		rt.Topic, rt.Partitions = topic, []int32{0}
		rg.Topics = append(rg.Topics, rt)
		req.Groups = append(req.Groups, rg)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("OffsetFetch: %v", err)
		}
		g := resp.Groups[0]
		if g.ErrorCode != 0 || len(g.Topics) == 0 {
			return g.ErrorCode, -1
		}
		return 0, g.Topics[0].Partitions[0].Offset
	}
	listed := func(typ string) map[string]string {
		t.Helper()
		req := kmsg.NewPtrListGroupsRequest()
		req.TypesFilter = []string{typ}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("ListGroups: %v", err)
		}
		out := map[string]string{}
		for _, g := range resp.Groups {
			out[g.Group] = g.GroupType
		}
		return out
	}

	// A classic group with a member.
	j := join("")
	if j.ErrorCode == kerr.MemberIDRequired.Code {
		j = join(j.MemberID)
	}
	if j.ErrorCode != 0 {
		t.Fatalf("classic JoinGroup: %v", kerr.ErrorForCode(j.ErrorCode))
	}
	if code := commit("", -1, 0); code != kerr.UnknownMemberID.Code {
		t.Errorf("simple commit to a classic group with a member: %v", kerr.ErrorForCode(code))
	}
	if r := heartbeat("m848", 0, nil); r.ErrorCode != kerr.GroupIDNotFound.Code {
		t.Errorf("consumer member joining a classic group with members: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	if g := listed("classic"); g[group] != "classic" {
		t.Errorf("ListGroups classic: %v", g)
	}
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.Group = group
	lm := kmsg.NewLeaveGroupRequestMember()
	lm.MemberID = j.MemberID
	leave.Members = append(leave.Members, lm)
	if resp, err := leave.RequestWith(ctx, cl); err != nil || resp.ErrorCode != 0 || resp.Members[0].ErrorCode != 0 {
		t.Fatalf("LeaveGroup: %v %+v", err, resp)
	}
	if code := commit("", -1, 7); code != 0 {
		t.Fatalf("simple commit to the empty classic group: %v", kerr.ErrorForCode(code))
	}

	// Empty: the consumer member converts the group and gets both partitions.
	r := heartbeat("m848", 0, nil)
	if r.ErrorCode != 0 || r.MemberEpoch < 1 || r.Assignment == nil || len(r.Assignment.Topics) != 1 || len(r.Assignment.Topics[0].Partitions) != 2 {
		t.Fatalf("consumer member joining the empty classic group: %v %+v", kerr.ErrorForCode(r.ErrorCode), r)
	}
	epoch := r.MemberEpoch
	if code, off := fetchCode("m848", epoch); code != 0 || off != 7 {
		t.Errorf("offsets after the conversion: %v offset %d, want 7", kerr.ErrorForCode(code), off)
	}
	if g := listed("consumer"); g[group] != "consumer" {
		t.Errorf("ListGroups consumer: %v", g)
	}
	if g := listed("classic"); g[group] != "" {
		t.Errorf("ListGroups classic lists the consumer group: %v", g)
	}
	if j := join(""); j.ErrorCode != kerr.InconsistentGroupProtocol.Code {
		t.Errorf("JoinGroup to a consumer group with a member: %v", kerr.ErrorForCode(j.ErrorCode))
	}
	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.Groups = []string{group}
	if resp, err := dg.RequestWith(ctx, cl); err != nil || resp.Groups[0].ErrorCode != kerr.GroupIDNotFound.Code {
		t.Errorf("DescribeGroups v6 of a consumer group: %v %+v", err, resp)
	}

	// Member epoch checks of OffsetCommit v9 and OffsetFetch v9.
	if code := commit("m848", epoch, 11); code != 0 {
		t.Errorf("commit at the member epoch: %v", kerr.ErrorForCode(code))
	}
	if code := commit("m848", epoch+1, 12); code != kerr.FencedMemberEpoch.Code {
		t.Errorf("commit at a newer epoch: %v", kerr.ErrorForCode(code))
	}
	if code := commit("m848", epoch-1, 12); code != kerr.StaleMemberEpoch.Code {
		t.Errorf("commit at an older epoch: %v", kerr.ErrorForCode(code))
	}
	if code := commit("nobody", epoch, 12); code != kerr.UnknownMemberID.Code {
		t.Errorf("commit by an unknown member: %v", kerr.ErrorForCode(code))
	}
	if code := commit("", -1, 12); code != kerr.UnknownMemberID.Code {
		t.Errorf("simple commit to a consumer group with a member: %v", kerr.ErrorForCode(code))
	}
	if code, _ := fetchCode("m848", epoch-1); code != kerr.StaleMemberEpoch.Code {
		t.Errorf("fetch at an older epoch: %v", kerr.ErrorForCode(code))
	}
	if code, off := fetchCode("m848", epoch); code != 0 || off != 11 {
		t.Errorf("fetch at the member epoch: %v offset %d, want 11", kerr.ErrorForCode(code), off)
	}
	if r := heartbeat("m848", epoch+5, nil); r.ErrorCode != kerr.FencedMemberEpoch.Code {
		t.Errorf("heartbeat at a newer epoch: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	if r := heartbeat("ghost", 3, nil); r.ErrorCode != kerr.UnknownMemberID.Code {
		t.Errorf("heartbeat of an unknown member: %v", kerr.ErrorForCode(r.ErrorCode))
	}

	// The consumer member leaves: the empty consumer group turns classic on JoinGroup.
	if r := heartbeat("m848", -1, nil); r.ErrorCode != 0 || r.MemberEpoch != -1 {
		t.Fatalf("leave: %v epoch %d", kerr.ErrorForCode(r.ErrorCode), r.MemberEpoch)
	}
	j = join("")
	if j.ErrorCode == kerr.MemberIDRequired.Code {
		j = join(j.MemberID)
	}
	if j.ErrorCode != 0 {
		t.Fatalf("classic JoinGroup to the empty consumer group: %v", kerr.ErrorForCode(j.ErrorCode))
	}
	cd := kmsg.NewPtrConsumerGroupDescribeRequest()
	cd.Groups = []string{group}
	if resp, err := cd.RequestWith(ctx, cl); err != nil || resp.Groups[0].ErrorCode != kerr.GroupIDNotFound.Code {
		t.Errorf("ConsumerGroupDescribe of the classic group again: %v %+v", err, resp)
	}
	if g := listed("classic"); g[group] != "classic" {
		t.Errorf("ListGroups classic after the downgrade: %v", g)
	}
}
