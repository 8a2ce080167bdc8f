package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

// TestShareGroupsServed drives ShareGroupService on the coordinator's gRPC port over
// Postgres, from two replicas: members join through one and heartbeat through the
// other, a session expires (swept under the sweep lock), and group ids keep their
// type: a share group id refuses classic joins and KIP-848 heartbeats, a classic or
// consumer group id refuses share members; ListGroups, DescribeGroups and DeleteGroups
// see share groups as Kafka shows them.
func TestShareGroupsServed(t *testing.T) {
	e := newEnv(t)
	e.cfg.ShareGroups.SessionTimeout = 2 * time.Second
	e.cfg.ShareGroups.HeartbeatInterval = 100 * time.Millisecond
	r1 := start(t, e.cfg, true)
	r2 := start(t, e.cfg, true)
	ctx := ctxT(t)
	dial := func(r *running) *grpc.ClientConn {
		cc, err := grpc.NewClient(r.srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		return cc
	}
	c1, c2 := dial(r1), dial(r2)
	share1, share2 := coordinatorv1.NewShareGroupServiceClient(c1), coordinatorv1.NewShareGroupServiceClient(c2)
	groups := coordinatorv1.NewGroupCoordinatorServiceClient(c1)
	consumers := coordinatorv1.NewConsumerGroupServiceClient(c2)
	if res := createOne(t, r1.client, "orders", 3, nil); res.GetErrorCode() != 0 {
		t.Fatalf("create topic: %v", res)
	}
	beat := func(c coordinatorv1.ShareGroupServiceClient, group, member string, epoch int32, topics ...string) *coordinatorv1.ShareGroupHeartbeatResponse {
		t.Helper()
		req := &coordinatorv1.ShareGroupHeartbeatRequest{GroupId: group, MemberId: member, MemberEpoch: epoch}
		if topics != nil {
			req.HasSubscribedTopicNames, req.SubscribedTopicNames = true, topics
		}
		resp, err := c.ShareGroupHeartbeat(ctx, req)
		if err != nil {
			t.Fatalf("ShareGroupHeartbeat %s/%s: %v", group, member, err)
		}
		return resp
	}

	// Three members join through alternating replicas; after one heartbeat each, the
	// three partitions are spread one per member.
	epochs := map[string]int32{}
	for i, m := range []string{"a", "b", "c"} {
		c := []coordinatorv1.ShareGroupServiceClient{share1, share2}[i%2]
		resp := beat(c, "sg", m, 0, "orders")
		if resp.GetErrorCode() != 0 || !resp.GetHasAssignment() {
			t.Fatalf("join %s: %v", m, resp)
		}
		epochs[m] = resp.GetMemberEpoch()
	}
	owned := map[int32]string{}
	for i, m := range []string{"a", "b", "c"} {
		c := []coordinatorv1.ShareGroupServiceClient{share2, share1}[i%2]
		resp := beat(c, "sg", m, epochs[m], "orders")
		if resp.GetErrorCode() != 0 || resp.GetMemberEpoch() != 3 {
			t.Fatalf("heartbeat %s: %v", m, resp)
		}
		for _, tp := range resp.GetAssignment() {
			for _, p := range tp.GetPartitions() {
				if o, dup := owned[p]; dup {
					t.Fatalf("partition %d to %s and %s", p, o, m)
				}
				owned[p] = m
			}
		}
		epochs[m] = resp.GetMemberEpoch()
	}
	if len(owned) != 3 {
		t.Fatalf("owned %v, want 3 partitions", owned)
	}
	if resp := beat(share1, "sg", "a", 9); resp.GetErrorCode() != int32(kerr.FencedMemberEpoch.Code) {
		t.Errorf("epoch 9: code %d, want FENCED_MEMBER_EPOCH", resp.GetErrorCode())
	}
	if resp := beat(share1, "sg", "zz", 3); resp.GetErrorCode() != int32(kerr.UnknownMemberID.Code) {
		t.Errorf("unknown member: code %d, want UNKNOWN_MEMBER_ID", resp.GetErrorCode())
	}
	if resp := beat(share1, "missing", "a", 1); resp.GetErrorCode() != int32(kerr.GroupIDNotFound.Code) {
		t.Errorf("heartbeat to a missing group: code %d, want GROUP_ID_NOT_FOUND", resp.GetErrorCode())
	}

	desc, err := share2.DescribeShareGroups(ctx, &coordinatorv1.DescribeShareGroupsRequest{GroupIds: []string{"sg", "missing"}})
	if err != nil {
		t.Fatal(err)
	}
	g := desc.GetGroups()[0]
	if g.GetErrorCode() != 0 || g.GetState() != "Stable" || g.GetGroupEpoch() != 3 || g.GetAssignorName() != "simple" || len(g.GetMembers()) != 3 {
		t.Errorf("describe sg: %v", g)
	}
	if code := desc.GetGroups()[1].GetErrorCode(); code != int32(kerr.GroupIDNotFound.Code) {
		t.Errorf("describe missing: code %d", code)
	}

	// Group types do not mix.
	join, err := groups.JoinGroup(ctx, &coordinatorv1.JoinGroupRequest{GroupId: "sg", SessionTimeoutMs: 10000, RebalanceTimeoutMs: 10000,
		ProtocolType: "consumer", Protocols: []*coordinatorv1.GroupProtocol{{Name: "range", Metadata: []byte{0}}}})
	if err != nil {
		t.Fatal(err)
	}
	if join.GetErrorCode() != int32(kerr.InconsistentGroupProtocol.Code) {
		t.Errorf("classic join to a share group: code %d, want INCONSISTENT_GROUP_PROTOCOL", join.GetErrorCode())
	}
	cg, err := consumers.ConsumerGroupHeartbeat(ctx, &coordinatorv1.ConsumerGroupHeartbeatRequest{Version: 1, GroupId: "sg", MemberId: "k",
		RebalanceTimeoutMs: 10000, HasSubscribedTopicNames: true, SubscribedTopicNames: []string{"orders"}, HasTopicPartitions: true})
	if err != nil {
		t.Fatal(err)
	}
	if cg.GetErrorCode() != int32(kerr.GroupIDNotFound.Code) {
		t.Errorf("KIP-848 join to a share group: code %d, want GROUP_ID_NOT_FOUND", cg.GetErrorCode())
	}
	commit, err := groups.OffsetCommit(ctx, &coordinatorv1.OffsetCommitRequest{GroupId: "sg", GenerationId: -1,
		Topics: []*coordinatorv1.OffsetCommitTopic{{Name: "orders", Partitions: []*coordinatorv1.OffsetCommitPartition{{Partition: 0, CommittedOffset: 1, CommittedLeaderEpoch: -1}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if code := commit.GetTopics()[0].GetPartitions()[0].GetErrorCode(); code != int32(kerr.GroupIDNotFound.Code) {
		t.Errorf("offset commit to a share group: code %d, want GROUP_ID_NOT_FOUND", code)
	}
	// An empty classic group (offsets only) and a consumer group refuse share members.
	if _, err := groups.OffsetCommit(ctx, &coordinatorv1.OffsetCommitRequest{GroupId: "classic", GenerationId: -1,
		Topics: []*coordinatorv1.OffsetCommitTopic{{Name: "orders", Partitions: []*coordinatorv1.OffsetCommitPartition{{Partition: 0, CommittedOffset: 1, CommittedLeaderEpoch: -1}}}}}); err != nil {
		t.Fatal(err)
	}
	if cg, err := consumers.ConsumerGroupHeartbeat(ctx, &coordinatorv1.ConsumerGroupHeartbeatRequest{Version: 1, GroupId: "kip848", MemberId: "k",
		RebalanceTimeoutMs: 10000, HasSubscribedTopicNames: true, SubscribedTopicNames: []string{"orders"}, HasTopicPartitions: true}); err != nil || cg.GetErrorCode() != 0 {
		t.Fatalf("consumer group join: %v %v", cg, err)
	}
	for _, id := range []string{"classic", "kip848"} {
		if resp := beat(share2, id, "s", 0, "orders"); resp.GetErrorCode() != int32(kerr.GroupIDNotFound.Code) {
			t.Errorf("share join to %s: code %d, want GROUP_ID_NOT_FOUND", id, resp.GetErrorCode())
		}
	}

	list, err := groups.ListGroups(ctx, &coordinatorv1.ListGroupsRequest{TypesFilter: []string{"Share"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetGroups()) != 1 || list.GetGroups()[0].GetGroupId() != "sg" || list.GetGroups()[0].GetGroupType() != "share" ||
		list.GetGroups()[0].GetProtocolType() != "share" || list.GetGroups()[0].GetState() != "Stable" {
		t.Errorf("ListGroups type share: %v", list.GetGroups())
	}
	dg, err := groups.DescribeGroups(ctx, &coordinatorv1.DescribeGroupsRequest{GroupIds: []string{"sg"}})
	if err != nil {
		t.Fatal(err)
	}
	if g := dg.GetGroups()[0]; g.GetState() != "Dead" || len(g.GetMembers()) != 0 {
		t.Errorf("DescribeGroups of a share group: %v, want Dead (not a classic group)", g)
	}
	del, err := groups.DeleteGroups(ctx, &coordinatorv1.DeleteGroupsRequest{GroupIds: []string{"sg"}})
	if err != nil {
		t.Fatal(err)
	}
	if code := del.GetResults()[0].GetErrorCode(); code != int32(kerr.NonEmptyGroup.Code) {
		t.Errorf("delete a share group with members: code %d, want NON_EMPTY_GROUP", code)
	}

	// Group configs: storage-core's share partitions read them with GetShareGroupConfig.
	alt, err := share2.AlterGroupConfigs(ctx, &coordinatorv1.AlterGroupConfigsRequest{Groups: []*coordinatorv1.GroupAlteration{{GroupId: "sg",
		Alterations: []*coordinatorv1.ConfigAlteration{
			{Name: "share.auto.offset.reset", Op: coordinatorv1.AlterOp_ALTER_OP_SET, Value: "by_duration:PT1M"},
			{Name: "share.delivery.count.limit", Op: coordinatorv1.AlterOp_ALTER_OP_SET, Value: "3"},
		}}}})
	if err != nil || alt.GetResults()[0].GetErrorCode() != 0 {
		t.Fatalf("AlterGroupConfigs: %v %v", alt, err)
	}
	cfg, err := share1.GetShareGroupConfig(ctx, &coordinatorv1.GetShareGroupConfigRequest{GroupId: "sg"})
	if err != nil || cfg.GetAutoOffsetReset() != "by_duration:pt1m" || cfg.GetAutoOffsetResetDurationMs() != 60000 ||
		cfg.GetDeliveryCountLimit() != 3 || cfg.GetRecordLockDurationMs() != 0 || cfg.GetIsolationLevel() != "" {
		t.Errorf("GetShareGroupConfig: %v %v", cfg, err)
	}

	// A group's own heartbeat interval reaches its members; unset, the broker's shows.
	if alt, err := share2.AlterGroupConfigs(ctx, &coordinatorv1.AlterGroupConfigsRequest{Groups: []*coordinatorv1.GroupAlteration{{GroupId: "sg2",
		Alterations: []*coordinatorv1.ConfigAlteration{{Name: "share.heartbeat.interval.ms", Op: coordinatorv1.AlterOp_ALTER_OP_SET, Value: "7000"}}}}}); err != nil || alt.GetResults()[0].GetErrorCode() != 0 {
		t.Fatalf("AlterGroupConfigs sg2: %v %v", alt, err)
	}
	if resp := beat(share1, "sg2", "x", 0, "orders"); resp.GetErrorCode() != 0 || resp.GetHeartbeatIntervalMs() != 7000 {
		t.Errorf("heartbeat interval of sg2: %v, want 7000", resp)
	}
	if resp := beat(share1, "sg2", "x", -1); resp.GetErrorCode() != 0 {
		t.Fatalf("leave sg2: %v", resp)
	}
	dc, err := share1.DescribeGroupConfigs(ctx, &coordinatorv1.DescribeGroupConfigsRequest{GroupIds: []string{"sg2"}, ConfigNames: []string{"share.session.timeout.ms"}})
	if err != nil || len(dc.GetGroups()[0].GetEntries()) != 1 || dc.GetGroups()[0].GetEntries()[0].GetValue() != "2000" {
		t.Errorf("session timeout default of sg2: %v %v, want the broker's 2000", dc, err)
	}

	// a leaves; b and c stop heartbeating: the sweep removes them once their
	// sessions end, and the empty group can be deleted.
	if resp := beat(share2, "sg", "a", -1); resp.GetErrorCode() != 0 || resp.GetMemberEpoch() != -1 {
		t.Fatalf("leave: %v", resp)
	}
	waitFor(t, "sessions of b and c expire", func() error {
		d, err := share1.DescribeShareGroups(ctx, &coordinatorv1.DescribeShareGroupsRequest{GroupIds: []string{"sg"}})
		if err != nil {
			return err
		}
		if g := d.GetGroups()[0]; g.GetState() != "Empty" || len(g.GetMembers()) != 0 {
			return fmt.Errorf("state %s with %d members", g.GetState(), len(g.GetMembers()))
		}
		return nil
	})
	// Their acquired records go back to the group: the ones that left (a, and x of
	// sg2) and the two whose sessions ended.
	waitFor(t, "records of a, b, c and x released", func() error {
		if got := e.storage.shares.releasedMembers(); fmt.Sprint(got) != "[sg/a sg/b sg/c sg2/x]" {
			return fmt.Errorf("released %v", got)
		}
		return nil
	})

	// Offsets admin, now that the group is empty (with members it is NON_EMPTY_GROUP,
	// checked by the e2e test): alter, describe, delete one topic, describe all.
	if res := createOne(t, r1.client, "other", 1, nil); res.GetErrorCode() != 0 {
		t.Fatalf("create topic: %v", res)
	}
	alterOff, err := share1.AlterShareGroupOffsets(ctx, &coordinatorv1.AlterShareGroupOffsetsRequest{GroupId: "sg", Topics: []*coordinatorv1.ShareOffsetsAlterTopic{
		{Name: "orders", Partitions: []*coordinatorv1.ShareOffsetsAlterPartition{{Partition: 0, StartOffset: 5}, {Partition: 2, StartOffset: 7}, {Partition: 9, StartOffset: 1}, {Partition: 1, StartOffset: -3}}},
		{Name: "other", Partitions: []*coordinatorv1.ShareOffsetsAlterPartition{{Partition: 0, StartOffset: 1}}},
		{Name: "nosuch", Partitions: []*coordinatorv1.ShareOffsetsAlterPartition{{Partition: 0, StartOffset: 1}}},
	}})
	if err != nil || alterOff.GetErrorCode() != 0 {
		t.Fatalf("AlterShareGroupOffsets: %v %v", alterOff, err)
	}
	wantCodes := [][]int32{{0, 0, int32(kerr.UnknownTopicOrPartition.Code), int32(kerr.InvalidRequest.Code)}, {0}, {int32(kerr.UnknownTopicOrPartition.Code)}}
	for i, tr := range alterOff.GetTopics() {
		for j, p := range tr.GetPartitions() {
			if p.GetErrorCode() != wantCodes[i][j] {
				t.Errorf("alter %s/%d: code %d, want %d", tr.GetName(), p.GetPartition(), p.GetErrorCode(), wantCodes[i][j])
			}
		}
	}
	descOff, err := share2.DescribeShareGroupOffsets(ctx, &coordinatorv1.DescribeShareGroupOffsetsRequest{GroupId: "sg",
		Topics: []*coordinatorv1.ShareOffsetsTopic{{Name: "orders", Partitions: []int32{0, 1, 2, 7}}, {Name: "nosuch", Partitions: []int32{0}}}})
	if err != nil || descOff.GetErrorCode() != 0 {
		t.Fatalf("DescribeShareGroupOffsets: %v %v", descOff, err)
	}
	var got []int64
	for _, tr := range descOff.GetTopics() {
		for _, p := range tr.GetPartitions() {
			got = append(got, p.GetStartOffset())
		}
	}
	if fmt.Sprint(got) != "[5 -1 7 -1 -1]" || len(descOff.GetTopics()[0].GetTopicId()) != 16 {
		t.Errorf("described start offsets %v (topics %v), want [5 -1 7 -1 -1]", got, descOff.GetTopics())
	}
	delOff, err := share1.DeleteShareGroupOffsets(ctx, &coordinatorv1.DeleteShareGroupOffsetsRequest{GroupId: "sg", Topics: []string{"orders", "nosuch"}})
	if err != nil || delOff.GetErrorCode() != 0 || delOff.GetTopics()[0].GetErrorCode() != 0 || delOff.GetTopics()[1].GetErrorCode() != int32(kerr.UnknownTopicOrPartition.Code) {
		t.Fatalf("DeleteShareGroupOffsets: %v %v", delOff, err)
	}
	all, err := share2.DescribeShareGroupOffsets(ctx, &coordinatorv1.DescribeShareGroupOffsetsRequest{GroupId: "sg", AllTopics: true})
	if err != nil || len(all.GetTopics()) != 1 || all.GetTopics()[0].GetName() != "other" || all.GetTopics()[0].GetPartitions()[0].GetStartOffset() != 1 {
		t.Errorf("describe all after deleting orders: %v %v", all, err)
	}
	for _, id := range []string{"classic", "kip848"} {
		if r, err := share1.AlterShareGroupOffsets(ctx, &coordinatorv1.AlterShareGroupOffsetsRequest{GroupId: id}); err != nil || r.GetErrorCode() != int32(kerr.GroupIDNotFound.Code) {
			t.Errorf("alter offsets of %s: %v %v, want GROUP_ID_NOT_FOUND", id, r, err)
		}
	}
	if r, err := share1.DeleteShareGroupOffsets(ctx, &coordinatorv1.DeleteShareGroupOffsetsRequest{GroupId: "nogroup", Topics: []string{"orders"}}); err != nil || r.GetErrorCode() != int32(kerr.GroupIDNotFound.Code) {
		t.Errorf("delete offsets of a missing group: %v %v, want GROUP_ID_NOT_FOUND", r, err)
	}

	del, err = groups.DeleteGroups(ctx, &coordinatorv1.DeleteGroupsRequest{GroupIds: []string{"sg"}})
	if err != nil {
		t.Fatal(err)
	}
	if code := del.GetResults()[0].GetErrorCode(); code != 0 {
		t.Errorf("delete the empty share group: code %d", code)
	}
	if left := e.storage.shares.spsos["sg"]; len(left) != 0 {
		t.Errorf("share state left after DeleteGroups: %v", left)
	}
	if resp := beat(share1, "sg", "b", epochs["b"]); resp.GetErrorCode() != int32(kerr.GroupIDNotFound.Code) {
		t.Errorf("heartbeat to the deleted group: code %d, want GROUP_ID_NOT_FOUND", resp.GetErrorCode())
	}
	if cfg, err := share1.GetShareGroupConfig(ctx, &coordinatorv1.GetShareGroupConfigRequest{GroupId: "sg"}); err != nil || cfg.GetDeliveryCountLimit() != 0 {
		t.Errorf("configs of the deleted group: %v %v, want none", cfg, err)
	}
}
