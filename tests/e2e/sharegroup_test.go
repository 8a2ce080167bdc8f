package e2e

import (
	"crypto/rand"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// uuidString is a random member id as clients make them (KIP-932: the client's own).
func uuidString() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// TestShareGroupMembership drives KIP-932 share group membership through the gateway
// with kgo and kadm: three members join a share group over a 3-partition topic and get
// one partition each (ShareGroupHeartbeat v1), kadm.DescribeShareGroups and ListGroups
// with type filter "share" show the group, stale epochs and unknown members are
// fenced, group ids keep their type (a classic group id refuses share members, a
// share group id refuses classic joins, KIP-848 describes and classic describes), a
// group with members is not deleted and an empty one is, and ApiVersions finalizes
// share.version 1.
func TestShareGroupMembership(t *testing.T) {
	s := sharedStack(t)
	cl := newClient(t, s.KafkaAddrs)
	adm := kadm.NewClient(cl)
	topic, group, classic := topicName("share"), topicName("sgrp"), topicName("sclassic")
	createTopic(t, adm, topic, 3, nil)
	ids := waitTopic(t, adm, topic, 3)
	ctx := ctxT(t, 2*time.Minute)

	versions, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	shareVersion := false
	for _, f := range versions.FinalizedFeatures {
		if f.Name == "share.version" && f.MinVersionLevel == 1 && f.MaxVersionLevel == 1 {
			shareVersion = true
		}
	}
	if !shareVersion {
		t.Errorf("share.version 1 not finalized: %+v", versions.FinalizedFeatures)
	}

	heartbeat := func(group, member string, epoch int32, topics ...string) *kmsg.ShareGroupHeartbeatResponse {
		t.Helper()
		req := kmsg.NewPtrShareGroupHeartbeatRequest()
		req.GroupID, req.MemberID, req.MemberEpoch, req.SubscribedTopicNames = group, member, epoch, topics
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("ShareGroupHeartbeat: %v", err)
		}
		return resp
	}
	members := []string{uuidString(), uuidString(), uuidString()}
	epochs := map[string]int32{}
	for _, m := range members {
		resp := heartbeat(group, m, 0, topic)
		if resp.ErrorCode != 0 || resp.Assignment == nil || resp.MemberID == nil || *resp.MemberID != m {
			t.Fatalf("join %s: %+v", m, resp)
		}
		if resp.HeartbeatIntervalMillis <= 0 {
			t.Errorf("heartbeat interval %d", resp.HeartbeatIntervalMillis)
		}
		epochs[m] = resp.MemberEpoch
	}
	owner := map[int32]string{}
	for _, m := range members {
		resp := heartbeat(group, m, epochs[m], topic)
		if resp.ErrorCode != 0 || resp.MemberEpoch != 3 || resp.Assignment == nil {
			t.Fatalf("heartbeat %s: %+v", m, resp)
		}
		epochs[m] = resp.MemberEpoch
		for _, tp := range resp.Assignment.TopicPartitions {
			if tp.TopicID != ids.ID {
				t.Errorf("assigned topic id %x, want %x", tp.TopicID, ids.ID)
			}
			for _, p := range tp.Partitions {
				if o, dup := owner[p]; dup {
					t.Errorf("partition %d assigned to %s and %s", p, o, m)
				}
				owner[p] = m
			}
		}
	}
	if len(owner) != 3 {
		t.Errorf("partitions assigned: %v, want 0, 1 and 2", owner)
	}

	described, err := adm.DescribeShareGroups(ctx, group)
	if err != nil {
		t.Fatalf("DescribeShareGroups: %v", err)
	}
	d := described[group]
	if d.Err != nil || d.GroupState != "Stable" || d.GroupEpoch != 3 || d.AssignmentEpoch != 3 || d.Assignor != "simple" || len(d.Members) != 3 {
		t.Errorf("described %+v", d)
	}
	if got := d.AssignedPartitions()[topic]; len(got) != 3 {
		t.Errorf("described assignment %v, want 3 partitions of %s", d.AssignedPartitions(), topic)
	}
	for _, m := range d.Members {
		if m.MemberEpoch != 3 || len(m.SubscribedTopicNames) != 1 || m.SubscribedTopicNames[0] != topic || len(m.Assignment[topic]) != 1 {
			t.Errorf("described member %+v", m)
		}
	}
	listed, err := adm.ListGroupsByType(ctx, []string{"share"})
	if err != nil {
		t.Fatalf("ListGroups share: %v", err)
	}
	if l, ok := listed[group]; !ok || l.GroupType != "share" || l.ProtocolType != "share" || l.State != "Stable" {
		t.Errorf("ListGroups share: %+v", listed[group])
	}
	for _, l := range listed {
		if l.GroupType != "share" {
			t.Errorf("ListGroups share listed %+v", l)
		}
	}
	if consumers, err := adm.ListGroupsByType(ctx, []string{"consumer", "classic"}); err != nil {
		t.Fatal(err)
	} else if _, ok := consumers[group]; ok {
		t.Errorf("share group listed under classic/consumer: %+v", consumers[group])
	}

	// Fencing and bad input.
	if resp := heartbeat(group, members[0], epochs[members[0]]+5); resp.ErrorCode != kerr.FencedMemberEpoch.Code {
		t.Errorf("future epoch: %v, want FENCED_MEMBER_EPOCH", kerr.ErrorForCode(resp.ErrorCode))
	}
	if resp := heartbeat(group, uuidString(), 3); resp.ErrorCode != kerr.UnknownMemberID.Code {
		t.Errorf("unknown member: %v, want UNKNOWN_MEMBER_ID", kerr.ErrorForCode(resp.ErrorCode))
	}
	if resp := heartbeat(group, "", 0, topic); resp.ErrorCode != kerr.InvalidRequest.Code {
		t.Errorf("empty member id: %v, want INVALID_REQUEST", kerr.ErrorForCode(resp.ErrorCode))
	}
	if resp := heartbeat(group, uuidString(), 0); resp.ErrorCode != kerr.InvalidRequest.Code {
		t.Errorf("join without topics: %v, want INVALID_REQUEST", kerr.ErrorForCode(resp.ErrorCode))
	}
	if resp := heartbeat(topicName("nogroup"), uuidString(), 4); resp.ErrorCode != kerr.GroupIDNotFound.Code {
		t.Errorf("heartbeat to a missing group: %v, want GROUP_ID_NOT_FOUND", kerr.ErrorForCode(resp.ErrorCode))
	}

	// Group ids keep their type.
	commit := kadm.Offsets{}
	commit.Add(kadm.Offset{Topic: topic, Partition: 0, At: 1, LeaderEpoch: -1})
	if err := adm.CommitAllOffsets(ctx, classic, commit); err != nil {
		t.Fatalf("commit to the classic group: %v", err)
	}
	if resp := heartbeat(classic, uuidString(), 0, topic); resp.ErrorCode != kerr.GroupIDNotFound.Code {
		t.Errorf("share join to a classic group: %v, want GROUP_ID_NOT_FOUND", kerr.ErrorForCode(resp.ErrorCode))
	}
	join := kmsg.NewPtrJoinGroupRequest()
	join.Group, join.ProtocolType, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = group, "consumer", 30000, 5000
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name, p.Metadata = "range", (&kmsg.ConsumerMemberMetadata{Topics: []string{topic}}).AppendTo(nil)
	join.Protocols = append(join.Protocols, p)
	if resp, err := join.RequestWith(ctx, cl); err != nil || resp.ErrorCode != kerr.InconsistentGroupProtocol.Code {
		t.Errorf("classic join to a share group: %v %v, want INCONSISTENT_GROUP_PROTOCOL", resp, err)
	}
	cgd := kmsg.NewPtrConsumerGroupDescribeRequest()
	cgd.Groups = []string{group}
	if resp, err := cgd.RequestWith(ctx, cl); err != nil || resp.Groups[0].ErrorCode != kerr.GroupIDNotFound.Code {
		t.Errorf("ConsumerGroupDescribe of a share group: %+v %v, want GROUP_ID_NOT_FOUND", resp, err)
	}
	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.Groups = []string{group}
	if resp, err := dg.RequestWith(ctx, cl); err != nil || resp.Groups[0].ErrorCode != kerr.GroupIDNotFound.Code {
		t.Errorf("DescribeGroups v6 of a share group: %+v %v, want GROUP_ID_NOT_FOUND", resp, err)
	}
	if d, err := adm.DescribeShareGroups(ctx, classic); err == nil && d[classic].Err == nil {
		t.Errorf("DescribeShareGroups of a classic group: %+v, want GROUP_ID_NOT_FOUND", d[classic])
	} else if d[classic].Err != nil && d[classic].Err != kerr.GroupIDNotFound {
		t.Errorf("DescribeShareGroups of a classic group: %v, want GROUP_ID_NOT_FOUND", d[classic].Err)
	}

	// A group with members is not deleted; once they leave, it is.
	if r, _ := adm.DeleteGroup(ctx, group); !errors.Is(r.Err, kerr.NonEmptyGroup) {
		t.Errorf("delete with members: %+v, want NON_EMPTY_GROUP", r)
	}
	for _, m := range members {
		if resp := heartbeat(group, m, -1); resp.ErrorCode != 0 || resp.MemberEpoch != -1 {
			t.Fatalf("leave %s: %+v", m, resp)
		}
	}
	if d, err := adm.DescribeShareGroups(ctx, group); err != nil || d[group].GroupState != "Empty" || len(d[group].Members) != 0 {
		t.Errorf("after the leaves: %+v %v", d[group], err)
	}
	if r, err := adm.DeleteGroup(ctx, group); err != nil || r.Err != nil {
		t.Errorf("delete empty share group: %+v %v", r, err)
	}
	if d, err := adm.DescribeShareGroups(ctx, group); err == nil && d[group].Err != kerr.GroupIDNotFound {
		t.Errorf("describe deleted group: %+v, want GROUP_ID_NOT_FOUND", d[group])
	}
}

// TestShareGroupConfigs sets and reads KIP-932 group configs (ConfigResource GROUP)
// through IncrementalAlterConfigs and DescribeConfigs: defaults until set, GROUP_CONFIG
// once set, back to the default on DELETE; unknown names, out-of-range values and
// APPEND are INVALID_CONFIG, an empty group name INVALID_REQUEST, and validate_only
// stores nothing.
func TestShareGroupConfigs(t *testing.T) {
	s := sharedStack(t)
	cl := newClient(t, s.KafkaAddrs)
	ctx := ctxT(t, time.Minute)
	group := topicName("sgcfg")
	str := func(v string) *string { return &v }
	alter := func(group string, validateOnly bool, cfgs ...kmsg.IncrementalAlterConfigsRequestResourceConfig) *kmsg.IncrementalAlterConfigsResponseResource {
		t.Helper()
		req := kmsg.NewPtrIncrementalAlterConfigsRequest()
		req.ValidateOnly = validateOnly
		r := kmsg.NewIncrementalAlterConfigsRequestResource()
		r.ResourceType, r.ResourceName, r.Configs = kmsg.ConfigResourceTypeGroupConfig, group, cfgs
		req.Resources = append(req.Resources, r)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("IncrementalAlterConfigs: %v", err)
		}
		return &resp.Resources[0]
	}
	op := func(name string, o kmsg.IncrementalAlterConfigOp, v *string) kmsg.IncrementalAlterConfigsRequestResourceConfig {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Op, c.Value = name, o, v
		return c
	}
	describe := func() map[string]kmsg.DescribeConfigsResponseResourceConfig {
		t.Helper()
		req := kmsg.NewPtrDescribeConfigsRequest()
		r := kmsg.NewDescribeConfigsRequestResource()
		r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
		req.Resources = append(req.Resources, r)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil || resp.Resources[0].ErrorCode != 0 {
			t.Fatalf("DescribeConfigs: %+v %v", resp, err)
		}
		out := map[string]kmsg.DescribeConfigsResponseResourceConfig{}
		for _, c := range resp.Resources[0].Configs {
			out[c.Name] = c
		}
		return out
	}
	d := describe()
	for name, def := range map[string]string{"share.auto.offset.reset": "latest", "share.isolation.level": "read_uncommitted",
		"share.record.lock.duration.ms": "30000", "share.delivery.count.limit": "5"} {
		if c, ok := d[name]; !ok || c.Value == nil || *c.Value != def || c.Source != kmsg.ConfigSourceDefaultConfig {
			t.Errorf("default %s: %+v, want %s DEFAULT_CONFIG", name, c, def)
		}
	}
	if r := alter(group, true, op("share.auto.offset.reset", kmsg.IncrementalAlterConfigOpSet, str("earliest"))); r.ErrorCode != 0 {
		t.Fatalf("validate only: %+v", r)
	}
	if c := describe()["share.auto.offset.reset"]; *c.Value != "latest" {
		t.Errorf("validate_only stored %s", *c.Value)
	}
	if r := alter(group, false, op("share.auto.offset.reset", kmsg.IncrementalAlterConfigOpSet, str("earliest")),
		op("share.record.lock.duration.ms", kmsg.IncrementalAlterConfigOpSet, str("15000"))); r.ErrorCode != 0 {
		t.Fatalf("set: %+v", r)
	}
	d = describe()
	if c := d["share.auto.offset.reset"]; *c.Value != "earliest" || c.Source != kmsg.ConfigSourceGroupConfig {
		t.Errorf("after set: %+v", c)
	}
	if c := d["share.record.lock.duration.ms"]; *c.Value != "15000" || c.Source != kmsg.ConfigSourceGroupConfig {
		t.Errorf("after set: %+v", c)
	}
	for _, bad := range []kmsg.IncrementalAlterConfigsRequestResourceConfig{
		op("share.no.such.config", kmsg.IncrementalAlterConfigOpSet, str("1")),
		op("share.delivery.count.limit", kmsg.IncrementalAlterConfigOpSet, str("1")),
		op("share.record.lock.duration.ms", kmsg.IncrementalAlterConfigOpSet, str("soon")),
		op("share.auto.offset.reset", kmsg.IncrementalAlterConfigOpSet, str("by_duration:yesterday")),
		op("share.isolation.level", kmsg.IncrementalAlterConfigOpAppend, str("read_committed")),
	} {
		if r := alter(group, false, bad); r.ErrorCode != kerr.InvalidConfig.Code {
			t.Errorf("%s %v: %v, want INVALID_CONFIG", bad.Name, bad.Value, kerr.ErrorForCode(r.ErrorCode))
		}
	}
	if r := alter("", false, op("share.delivery.count.limit", kmsg.IncrementalAlterConfigOpSet, str("3"))); r.ErrorCode != kerr.InvalidRequest.Code {
		t.Errorf("empty group name: %v, want INVALID_REQUEST", kerr.ErrorForCode(r.ErrorCode))
	}
	if r := alter(group, false, op("share.auto.offset.reset", kmsg.IncrementalAlterConfigOpDelete, nil)); r.ErrorCode != 0 {
		t.Fatalf("delete: %+v", r)
	}
	if c := describe()["share.auto.offset.reset"]; *c.Value != "latest" || c.Source != kmsg.ConfigSourceDefaultConfig {
		t.Errorf("after delete: %+v", c)
	}
}
