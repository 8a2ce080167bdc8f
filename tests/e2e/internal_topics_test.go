package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestInternalTopicsWithKgo: Kafka's internal topics, listed by Metadata with 50
// partitions, answer kgo and kadm as a Kafka broker does for topics holding nothing
// (our offsets and transactions live in Postgres): DescribeTopicConfigs shows the
// configs Kafka creates them with, set on the topic; every partition's end offset is
// 0; a kgo consumer of __consumer_offsets polls without an error; Produce and
// DeleteRecords are INVALID_TOPIC_EXCEPTION.
func TestInternalTopicsWithKgo(t *testing.T) {
	s := sharedStack(t)
	cl := newClient(t, s.KafkaAddrs, kgo.RecordRetries(2))
	adm := kadm.NewClient(cl)
	ctx := ctxT(t, time.Minute)
	const co, ts = "__consumer_offsets", "__transaction_state"

	rcs, err := adm.DescribeTopicConfigs(ctx, co, ts)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct{ topic, compression string }{{co, "producer"}, {ts, "uncompressed"}} {
		rc, err := rcs.On(want.topic, nil)
		if err != nil || rc.Err != nil {
			t.Fatalf("DescribeTopicConfigs %s: %v %v", want.topic, err, rc.Err)
		}
		set := map[string]string{}
		for _, c := range rc.Configs {
			if c.Source == kmsg.ConfigSourceDynamicTopicConfig {
				set[c.Key] = c.MaybeValue()
			}
		}
		if set["cleanup.policy"] != "compact" || set["compression.type"] != want.compression || set["segment.bytes"] != "104857600" {
			t.Errorf("%s configs set on the topic: %v", want.topic, set)
		}
	}

	ends, err := adm.ListEndOffsets(ctx, co)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	ends.Each(func(o kadm.ListedOffset) {
		n++
		if o.Err != nil || o.Offset != 0 {
			t.Errorf("%s/%d end offset %d, %v", o.Topic, o.Partition, o.Offset, o.Err)
		}
	})
	if n != 50 {
		t.Errorf("%s: %d end offsets listed, want 50", co, n)
	}

	reader := newClient(t, s.KafkaAddrs, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{co: {0: kgo.NewOffset().AtStart(), 49: kgo.NewOffset().AtEnd()}}),
		kgo.FetchMaxWait(500*time.Millisecond))
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	for pctx.Err() == nil {
		fs := reader.PollFetches(pctx)
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("consuming %s/%d: %v", topic, p, err)
			}
		})
		if fs.NumRecords() != 0 {
			t.Errorf("%d records read from %s", fs.NumRecords(), co)
		}
	}
	cancel()

	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: co, Value: []byte("x")}).FirstErr(); !errors.Is(err, kerr.InvalidTopicException) {
		t.Errorf("produce to %s: %v, want INVALID_TOPIC_EXCEPTION", co, err)
	}
	var os kadm.Offsets
	os.AddOffset(co, 0, 0, -1)
	del, err := adm.DeleteRecords(ctx, os)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := del.Lookup(co, 0); !ok || !errors.Is(r.Err, kerr.InvalidTopicException) {
		t.Errorf("DeleteRecords %s/0: %+v, want INVALID_TOPIC_EXCEPTION", co, r)
	}
}

// TestInternalTopicsAdmin: kadm's topic and config changes naming Kafka's internal
// topics. Kafka 4's controller would delete, grow or reconfigure them like any topic
// (only kafka-topics.sh refuses, client side); ours hold the coordinator's state, so
// DeleteTopics (by name and by the id Metadata lists) is TOPIC_DELETION_DISABLED,
// CreatePartitions INVALID_PARTITIONS (at or below 50 with the messages of Kafka's
// ReplicationControlManager), AlterConfigs and IncrementalAlterConfigs (validate only
// or not) POLICY_VIOLATION, and each topic is then still listed with 50 partitions
// and its configs unchanged. __cluster_metadata, no topic in Kafka either, stays
// UNKNOWN_TOPIC_OR_PARTITION for all four.
func TestInternalTopicsAdmin(t *testing.T) {
	s := sharedStack(t)
	cl := newClient(t, s.KafkaAddrs)
	adm := kadm.NewClient(cl)
	ctx := ctxT(t, time.Minute)
	internal := []string{"__consumer_offsets", "__share_group_state", "__transaction_state"}

	md, err := adm.ListTopicsWithInternal(ctx, internal...)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range internal {
		td := md[it]
		if td.Err != nil || !td.IsInternal || len(td.Partitions) != 50 || td.ID == (kadm.TopicID{}) {
			t.Fatalf("Metadata %s: %+v", it, td)
		}
	}

	dels, err := adm.DeleteTopics(ctx, internal...)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range internal {
		if r, ok := dels[it]; !ok || !errors.Is(r.Err, kerr.TopicDeletionDisabled) {
			t.Errorf("DeleteTopics %s: %+v, want TOPIC_DELETION_DISABLED", it, r)
		}
	}
	dreq := kmsg.NewPtrDeleteTopicsRequest()
	dt := kmsg.NewDeleteTopicsRequestTopic()
	dt.TopicID = md[internal[0]].ID
	dreq.Topics = append(dreq.Topics, dt)
	dresp, err := dreq.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(dresp.Topics) != 1 || dresp.Topics[0].ErrorCode != kerr.TopicDeletionDisabled.Code || dresp.Topics[0].Topic == nil || *dresp.Topics[0].Topic != internal[0] {
		t.Errorf("DeleteTopics by the id of %s: %+v, want TOPIC_DELETION_DISABLED naming it", internal[0], dresp.Topics)
	}

	for _, c := range []struct {
		count int
		msg   string
	}{
		{50, "Topic already has 50 partition(s)."},
		{10, "The topic __consumer_offsets currently has 50 partition(s); 10 would not be an increase."},
		{60, "The partition count of internal topic __consumer_offsets is fixed at 50."},
	} {
		cps, err := adm.UpdatePartitions(ctx, c.count, internal[0])
		if err != nil {
			t.Fatal(err)
		}
		r := cps[internal[0]]
		if !errors.Is(r.Err, kerr.InvalidPartitions) || r.ErrMessage != c.msg {
			t.Errorf("CreatePartitions %s to %d: %v %q, want INVALID_PARTITIONS %q", internal[0], c.count, r.Err, r.ErrMessage, c.msg)
		}
	}
	cps, err := adm.ValidateUpdatePartitions(ctx, 51, internal...)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range internal {
		if r := cps[it]; !errors.Is(r.Err, kerr.InvalidPartitions) {
			t.Errorf("CreatePartitions %s to 51, validate only: %v, want INVALID_PARTITIONS", it, r.Err)
		}
	}

	retention := "3600000"
	alter := []kadm.AlterConfig{{Name: "retention.ms", Value: &retention}}
	for _, validate := range []bool{false, true} {
		call := adm.AlterTopicConfigs
		state := adm.AlterTopicConfigsState
		if validate {
			call, state = adm.ValidateAlterTopicConfigs, adm.ValidateAlterTopicConfigsState
		}
		inc, err := call(ctx, alter, internal...)
		if err != nil {
			t.Fatal(err)
		}
		legacy, err := state(ctx, alter, internal...)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range internal {
			for api, rs := range map[string]kadm.AlterConfigsResponses{"IncrementalAlterConfigs": inc, "AlterConfigs": legacy} {
				if r, err := rs.On(it, nil); err != nil || !errors.Is(r.Err, kerr.PolicyViolation) {
					t.Errorf("%s %s (validate only %v): %+v %v, want POLICY_VIOLATION", api, it, validate, r, err)
				}
			}
		}
	}

	// Nothing changed: still listed with 50 partitions, retention.ms not set.
	md, err = adm.ListTopicsWithInternal(ctx, internal...)
	if err != nil {
		t.Fatal(err)
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, internal...)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range internal {
		if td := md[it]; td.Err != nil || len(td.Partitions) != 50 {
			t.Errorf("after the changes, Metadata %s: %v, %d partitions", it, td.Err, len(td.Partitions))
		}
		rc, err := rcs.On(it, nil)
		if err != nil || rc.Err != nil {
			t.Fatalf("DescribeTopicConfigs %s: %v %v", it, err, rc.Err)
		}
		for _, c := range rc.Configs {
			if c.Key == "retention.ms" && c.Source == kmsg.ConfigSourceDynamicTopicConfig {
				t.Errorf("%s: retention.ms set to %s", it, c.MaybeValue())
			}
		}
	}

	const cm = "__cluster_metadata"
	cmDel, err := adm.DeleteTopics(ctx, cm)
	if err != nil {
		t.Fatal(err)
	}
	if r := cmDel[cm]; !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
		t.Errorf("DeleteTopics %s: %v, want UNKNOWN_TOPIC_OR_PARTITION", cm, r.Err)
	}
	cmParts, err := adm.UpdatePartitions(ctx, 2, cm)
	if err != nil {
		t.Fatal(err)
	}
	if r := cmParts[cm]; !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
		t.Errorf("CreatePartitions %s: %v, want UNKNOWN_TOPIC_OR_PARTITION", cm, r.Err)
	}
	for api, f := range map[string]func(context.Context, []kadm.AlterConfig, ...string) (kadm.AlterConfigsResponses, error){
		"IncrementalAlterConfigs": adm.AlterTopicConfigs, "AlterConfigs": adm.AlterTopicConfigsState} {
		rs, err := f(ctx, alter, cm)
		if err != nil {
			t.Fatal(err)
		}
		if r, err := rs.On(cm, nil); err != nil || !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
			t.Errorf("%s %s: %+v %v, want UNKNOWN_TOPIC_OR_PARTITION", api, cm, r, err)
		}
	}
}
