package handler

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/services/kafka-gateway/internal/fake"
)

// listOffsetsTopics builds a ListOffsets request; each part is (partition, timestamp,
// current leader epoch).
func listOffsetsTopics(entries ...listOffsetsEntry) *kmsg.ListOffsetsRequest {
	req := kmsg.NewPtrListOffsetsRequest()
	for _, e := range entries {
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = e.topic
		for _, p := range e.parts {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = p.part, p.ts, p.epoch
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	return req
}

type listOffsetsEntry struct {
	topic string
	parts []listOffsetsPart
}

type listOffsetsPart struct {
	part  int32
	ts    int64
	epoch int32
}

// TestListOffsetsDuplicatePartition: Kafka (ListOffsetsRequest.duplicatePartitions,
// ReplicaManager.fetchOffset) answers a topic-partition listed more than once with
// INVALID_REQUEST, once, in every version; the others are answered as usual.
func TestListOffsetsDuplicatePartition(t *testing.T) {
	e := newEnv(t, nil)
	e.createTopic(t, "lod", 2, nil)
	e.produce(t, "lod", 1, fake.Batch("a", "b"))
	for _, v := range []int16{1, 4, 10} {
		req := listOffsetsTopics(
			listOffsetsEntry{"lod", []listOffsetsPart{{0, -1, -1}, {1, -1, -1}, {0, -2, -1}}},
			listOffsetsEntry{"lod", []listOffsetsPart{{0, -1, -1}}},
		)
		resp := e.do(t, req, v).(*kmsg.ListOffsetsResponse)
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 2 {
			t.Fatalf("v%d: want one topic with partitions 0 and 1, got %+v", v, resp.Topics)
		}
		p0, p1 := resp.Topics[0].Partitions[0], resp.Topics[0].Partitions[1]
		if p0.Partition != 0 || p0.ErrorCode != kerr.InvalidRequest.Code || p0.Offset != -1 || p0.Timestamp != -1 {
			t.Errorf("v%d duplicated partition 0: %+v, want INVALID_REQUEST", v, p0)
		}
		if p1.Partition != 1 || p1.ErrorCode != 0 || p1.Offset != 2 {
			t.Errorf("v%d partition 1: %+v, want offset 2", v, p1)
		}
	}
	// Duplicates are refused before anything else: a duplicated partition that does not
	// exist is INVALID_REQUEST too.
	req := listOffsetsTopics(listOffsetsEntry{"lod", []listOffsetsPart{{7, -1, -1}, {7, -1, -1}}})
	resp := e.do(t, req, 10).(*kmsg.ListOffsetsResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 || resp.Topics[0].Partitions[0].ErrorCode != kerr.InvalidRequest.Code {
		t.Errorf("duplicated unknown partition: %+v, want one INVALID_REQUEST", resp.Topics)
	}
}

// TestListOffsetsCurrentLeaderEpoch: current_leader_epoch (v4+) other than -1 is
// compared with the partition's epoch, 0 (Kafka: Partition.checkCurrentLeaderEpoch):
// newer is UNKNOWN_LEADER_EPOCH, older FENCED_LEADER_EPOCH; existence is checked first.
func TestListOffsetsCurrentLeaderEpoch(t *testing.T) {
	e := newEnv(t, nil)
	e.createTopic(t, "loe", 1, nil)
	e.produce(t, "loe", 0, fake.Batch("a"))
	ask := func(topic string, part int32, ts int64, epoch int32, v int16) kmsg.ListOffsetsResponseTopicPartition {
		t.Helper()
		req := listOffsetsTopics(listOffsetsEntry{topic, []listOffsetsPart{{part, ts, epoch}}})
		return e.do(t, req, v).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
	}
	for _, c := range []struct {
		name  string
		topic string
		part  int32
		ts    int64
		epoch int32
		v     int16
		want  int16
	}{
		{"not given", "loe", 0, -1, -1, 4, 0},
		{"current", "loe", 0, -1, 0, 10, 0},
		{"newer", "loe", 0, -1, 1, 4, kerr.UnknownLeaderEpoch.Code},
		{"newer, latest tiered", "loe", 0, -5, 3, 9, kerr.UnknownLeaderEpoch.Code},
		{"older", "loe", 0, -2, -5, 10, kerr.FencedLeaderEpoch.Code},
		{"newer, unknown partition", "loe", 3, -1, 1, 4, kerr.UnknownTopicOrPartition.Code},
		{"older, unknown topic", "nope", 0, -1, -2, 4, kerr.UnknownTopicOrPartition.Code},
	} {
		p := ask(c.topic, c.part, c.ts, c.epoch, c.v)
		if p.ErrorCode != c.want {
			t.Errorf("%s: %s, want %s", c.name, code(p.ErrorCode), code(c.want))
		}
		if c.want != 0 && (p.Offset != -1 || p.Timestamp != -1 || p.LeaderEpoch != -1) {
			t.Errorf("%s: error answer carries %+v", c.name, p)
		}
		if c.want == 0 && (p.Offset != 1 && p.Offset != 0) {
			t.Errorf("%s: offset %d", c.name, p.Offset)
		}
	}
}

// TestOffsetForLeaderEpochFenced: a current_leader_epoch below ours (0), other than -1,
// is FENCED_LEADER_EPOCH, as in ListOffsets.
func TestOffsetForLeaderEpochFenced(t *testing.T) {
	e := newEnv(t, nil)
	e.createTopic(t, "ofe", 1, nil)
	for _, c := range []struct {
		epoch int32
		want  int16
	}{{-1, 0}, {0, 0}, {1, kerr.UnknownLeaderEpoch.Code}, {-3, kerr.FencedLeaderEpoch.Code}} {
		req := kmsg.NewPtrOffsetForLeaderEpochRequest()
		rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
		rt.Topic = "ofe"
		rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		rp.CurrentLeaderEpoch, rp.LeaderEpoch = c.epoch, 0
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		if got := e.do(t, req, 4).(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions[0]; got.ErrorCode != c.want {
			t.Errorf("current epoch %d: %s, want %s", c.epoch, code(got.ErrorCode), code(c.want))
		}
	}
}
