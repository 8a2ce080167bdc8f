package e2e

import (
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
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
		"share.record.lock.duration.ms": "30000", "share.delivery.count.limit": "5", "share.session.timeout.ms": "45000",
		"share.heartbeat.interval.ms": "5000"} {
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

// TestShareGroupOffsetsAdmin drives the share group offsets admin with kadm against
// storage-core's share partitions: AlterShareGroupOffsets creates the group and sets a
// start offset, DescribeShareGroupOffsets reads it back (named and all partitions; -1
// for a partition without state), a group with a member refuses both alter and delete
// (NON_EMPTY_GROUP), DeleteShareGroupOffsets drops the state, and DeleteGroups of the
// empty share group removes what is left.
func TestShareGroupOffsetsAdmin(t *testing.T) {
	s := sharedStack(t)
	cl := newClient(t, s.KafkaAddrs)
	adm := kadm.NewClient(cl)
	topic, group := topicName("shoff"), topicName("shoffg")
	createTopic(t, adm, topic, 2, nil)
	ctx := ctxT(t, 2*time.Minute)
	producer := newClient(t, s.KafkaAddrs, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for i := range 20 {
		if err := producer.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte(fmt.Sprint(i))}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	set := kadm.Offsets{}
	set.Add(kadm.Offset{Topic: topic, Partition: 0, At: 8})
	alt, err := adm.AlterShareGroupOffsets(ctx, group, set)
	if err != nil || !alt.Ok() {
		t.Fatalf("AlterShareGroupOffsets: %v %v", alt, err)
	}
	startOffsets := func() map[int32]int64 {
		t.Helper()
		d, err := adm.DescribeShareGroupOffsets(ctx, group)
		if err != nil || d[group].Err != nil {
			t.Fatalf("DescribeShareGroupOffsets: %v %v", d, err)
		}
		out := map[int32]int64{}
		for p, o := range d[group].Offsets[topic] {
			if o.Err != nil {
				t.Errorf("partition %d: %v", p, o.Err)
			}
			out[p] = o.StartOffset
		}
		return out
	}
	if got := startOffsets(); got[0] != 8 || len(got) != 1 {
		t.Errorf("start offsets after alter: %v, want partition 0 at 8 only", got)
	}
	named := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	rg := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
	rg.GroupID = group
	rt := kmsg.NewDescribeShareGroupOffsetsRequestGroupTopic()
	rt.Topic, rt.Partitions = topic, []int32{0, 1}
	rg.Topics = append(rg.Topics, rt)
	named.Groups = append(named.Groups, rg)
	if resp, err := named.RequestWith(ctx, cl); err != nil || len(resp.Groups) != 1 || len(resp.Groups[0].Topics) != 1 {
		t.Errorf("describe named: %+v %v", resp, err)
	} else if ps := resp.Groups[0].Topics[0].Partitions; ps[0].StartOffset != 8 || ps[0].Lag != 12 || ps[1].StartOffset != -1 || ps[1].Lag != -1 {
		t.Errorf("describe named partitions: %+v, want 8 (lag 12) and -1", ps)
	}

	// A member joins: the offsets may not change.
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.GroupID, req.MemberID, req.SubscribedTopicNames = group, uuidString(), []string{topic}
	hb, err := req.RequestWith(ctx, cl)
	if err != nil || hb.ErrorCode != 0 {
		t.Fatalf("join: %+v %v", hb, err)
	}
	if _, err := adm.AlterShareGroupOffsets(ctx, group, set); !errors.Is(err, kerr.NonEmptyGroup) {
		if alt, _ := adm.AlterShareGroupOffsets(ctx, group, set); !errors.Is(alt.Error(), kerr.NonEmptyGroup) {
			t.Errorf("alter with a member: %v / %v, want NON_EMPTY_GROUP", err, alt)
		}
	}
	if del, err := adm.DeleteShareGroupOffsets(ctx, group, topic); !errors.Is(err, kerr.NonEmptyGroup) && !errors.Is(del.Error(), kerr.NonEmptyGroup) {
		t.Errorf("delete with a member: %v / %v, want NON_EMPTY_GROUP", err, del)
	}
	req.MemberEpoch = -1
	req.SubscribedTopicNames = nil
	if hb, err := req.RequestWith(ctx, cl); err != nil || hb.ErrorCode != 0 {
		t.Fatalf("leave: %+v %v", hb, err)
	}

	if del, err := adm.DeleteShareGroupOffsets(ctx, group, topic, topicName("nosuch")); err != nil {
		t.Fatalf("DeleteShareGroupOffsets: %v", err)
	} else if del[topic] != nil || len(del) != 2 {
		t.Errorf("DeleteShareGroupOffsets: %v, want %s deleted and the missing topic UNKNOWN_TOPIC_OR_PARTITION", del, topic)
	}
	if got := startOffsets(); len(got) != 0 {
		t.Errorf("start offsets after delete: %v, want none", got)
	}
	if _, err := adm.DeleteShareGroupOffsets(ctx, topicName("nogroup"), topic); !errors.Is(err, kerr.GroupIDNotFound) {
		t.Errorf("delete offsets of a missing group: %v, want GROUP_ID_NOT_FOUND", err)
	}

	// DeleteGroups of an empty share group takes its share state with it.
	if alt, err := adm.AlterShareGroupOffsets(ctx, group, set); err != nil || !alt.Ok() {
		t.Fatalf("alter again: %v %v", alt, err)
	}
	if r, err := adm.DeleteGroup(ctx, group); err != nil || r.Err != nil {
		t.Fatalf("DeleteGroups: %+v %v", r, err)
	}
	// The same id as a new share group (a member joins and leaves) has no state left
	// (describe-all lists what storage-core still holds).
	req.MemberEpoch, req.SubscribedTopicNames = 0, []string{topic}
	if hb, err := req.RequestWith(ctx, cl); err != nil || hb.ErrorCode != 0 {
		t.Fatalf("join the new group: %+v %v", hb, err)
	}
	req.MemberEpoch, req.SubscribedTopicNames = -1, nil
	if hb, err := req.RequestWith(ctx, cl); err != nil || hb.ErrorCode != 0 {
		t.Fatalf("leave the new group: %+v %v", hb, err)
	}
	if got := startOffsets(); len(got) != 0 {
		t.Errorf("start offsets of the deleted group: %v, want none", got)
	}
}

// TestShareGroupBadInput sends the share group APIs what a broken or hostile client
// might: every answer is Kafka's error code, and the connection stays usable.
func TestShareGroupBadInput(t *testing.T) {
	s := sharedStack(t)
	cl := newClient(t, s.KafkaAddrs)
	adm := kadm.NewClient(cl)
	topic := topicName("shbad")
	createTopic(t, adm, topic, 1, nil)
	ctx := ctxT(t, time.Minute)
	blank := "  "

	hb := kmsg.NewPtrShareGroupHeartbeatRequest()
	hb.GroupID, hb.MemberID, hb.MemberEpoch, hb.SubscribedTopicNames = "", uuidString(), 0, []string{topic}
	for _, mod := range []func(r *kmsg.ShareGroupHeartbeatRequest){
		func(r *kmsg.ShareGroupHeartbeatRequest) {},                                     // empty group id
		func(r *kmsg.ShareGroupHeartbeatRequest) { r.GroupID, r.RackID = "g", &blank },  // blank rack
		func(r *kmsg.ShareGroupHeartbeatRequest) { r.GroupID, r.MemberEpoch = "g", -7 }, // epoch below -1
		func(r *kmsg.ShareGroupHeartbeatRequest) { r.GroupID, r.MemberID = "g", blank }, // blank member id
	} {
		r := *hb
		mod(&r)
		if resp, err := r.RequestWith(ctx, cl); err != nil || resp.ErrorCode != kerr.InvalidRequest.Code {
			t.Errorf("heartbeat %+v: %+v %v, want INVALID_REQUEST", r, resp, err)
		}
	}
	// Subscribing to topics that do not exist (or cannot) is allowed: no assignment.
	hb.GroupID, hb.SubscribedTopicNames = topicName("shbadg"), []string{"no-such-topic", "bad~name", ""}
	if resp, err := hb.RequestWith(ctx, cl); err != nil || resp.ErrorCode != 0 || resp.Assignment == nil || len(resp.Assignment.TopicPartitions) != 0 {
		t.Errorf("join to missing topics: %+v %v, want success and an empty assignment", resp, err)
	}

	d := kmsg.NewPtrShareGroupDescribeRequest()
	d.GroupIDs = []string{"", hb.GroupID, hb.GroupID}
	if resp, err := d.RequestWith(ctx, cl); err != nil || len(resp.Groups) != 3 || resp.Groups[0].ErrorCode != kerr.InvalidGroupID.Code ||
		resp.Groups[1].ErrorCode != 0 || resp.Groups[2].ErrorCode != 0 {
		t.Errorf("describe with an empty id and a duplicate: %+v %v", resp, err)
	}

	dso := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	rg := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
	rt := kmsg.NewDescribeShareGroupOffsetsRequestGroupTopic()
	rt.Topic, rt.Partitions = topic, []int32{-1, 0, 1 << 30}
	rg.GroupID, rg.Topics = hb.GroupID, []kmsg.DescribeShareGroupOffsetsRequestGroupTopic{rt}
	empty := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
	dso.Groups = []kmsg.DescribeShareGroupOffsetsRequestGroup{rg, empty}
	if resp, err := dso.RequestWith(ctx, cl); err != nil || len(resp.Groups) != 2 || resp.Groups[1].ErrorCode != kerr.InvalidGroupID.Code {
		t.Errorf("describe offsets: %+v %v", resp, err)
	} else {
		for _, p := range resp.Groups[0].Topics[0].Partitions {
			if p.ErrorCode != 0 || p.StartOffset != -1 {
				t.Errorf("describe offsets of partition %d: %+v, want -1 without error", p.Partition, p)
			}
		}
	}

	aso := kmsg.NewPtrAlterShareGroupOffsetsRequest()
	aso.GroupID = topicName("shbadalter")
	at := kmsg.NewAlterShareGroupOffsetsRequestTopic()
	at.Topic = topic
	for _, p := range []struct {
		p   int32
		off int64
	}{{-1, 0}, {5, 0}, {0, -5}} {
		ap := kmsg.NewAlterShareGroupOffsetsRequestTopicPartition()
		ap.Partition, ap.StartOffset = p.p, p.off
		at.Partitions = append(at.Partitions, ap)
	}
	aso.Topics = []kmsg.AlterShareGroupOffsetsRequestTopic{at}
	if resp, err := aso.RequestWith(ctx, cl); err != nil || resp.ErrorCode != 0 || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 3 {
		t.Errorf("alter offsets: %+v %v", resp, err)
	} else {
		want := []int16{kerr.UnknownTopicOrPartition.Code, kerr.UnknownTopicOrPartition.Code, kerr.InvalidRequest.Code}
		for i, p := range resp.Topics[0].Partitions {
			if p.ErrorCode != want[i] {
				t.Errorf("alter partition %d: %v, want %v", p.Partition, kerr.ErrorForCode(p.ErrorCode), kerr.ErrorForCode(want[i]))
			}
		}
	}
	aso.GroupID = ""
	if resp, err := aso.RequestWith(ctx, cl); err != nil || resp.ErrorCode != kerr.InvalidGroupID.Code {
		t.Errorf("alter offsets of an empty group id: %+v %v", resp, err)
	}
	del := kmsg.NewPtrDeleteShareGroupOffsetsRequest()
	del.GroupID = ""
	if resp, err := del.RequestWith(ctx, cl); err != nil || resp.ErrorCode != kerr.InvalidGroupID.Code {
		t.Errorf("delete offsets of an empty group id: %+v %v", resp, err)
	}
	// The connection still answers.
	if _, err := adm.ListGroupsByType(ctx, []string{"share"}); err != nil {
		t.Errorf("ListGroups after the bad input: %v", err)
	}
}

// TestShareGroupLongID: a kgo share consumer whose group id has 255 bytes (Kafka
// sets no bound; share state was named by the id's hex, which fits 122 bytes) joins
// and reads every record of a topic, and kadm describes the group's offsets.
func TestShareGroupLongID(t *testing.T) {
	s := sharedStack(t)
	adm := newAdmin(t, s.KafkaAddrs)
	topic := topicName("sharelong")
	createTopic(t, adm, topic, 2, nil)
	base := topicName("sharelong-g")
	group := base + strings.Repeat("g", 255-len(base))
	ctx := ctxT(t, 2*time.Minute)
	setShareGroupConfigs(t, newClient(t, s.KafkaAddrs), group, "share.auto.offset.reset", "earliest")
	produceKeyed(t, newClient(t, s.KafkaAddrs, kgo.DefaultProduceTopic(topic)), topic, "k", 20)

	cl := newClient(t, s.KafkaAddrs, kgo.ShareGroup(group), kgo.ConsumeTopics(topic))
	seen := map[string]bool{}
	for len(seen) < 20 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%d of 20 records read", len(seen))
		}
		for _, e := range fs.Errors() {
			t.Fatalf("share fetch with a %d-byte group id: %v", len(group), e)
		}
		for _, r := range fs.Records() {
			seen[string(r.Key)] = true
		}
	}
	offsets, err := adm.DescribeShareGroupOffsets(ctx, group)
	if err != nil {
		t.Fatalf("DescribeShareGroupOffsets: %v", err)
	}
	if g, ok := offsets[group]; !ok || g.Err != nil {
		t.Fatalf("DescribeShareGroupOffsets %d-byte group: %+v", len(group), offsets)
	}
}
