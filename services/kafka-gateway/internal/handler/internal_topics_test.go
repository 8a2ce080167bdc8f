package handler

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
	"github.com/tributary/tributary/services/kafka-gateway/internal/fake"
)

func listOffsetsReq(topic string, partition int32, ts int64) *kmsg.ListOffsetsRequest {
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = partition, ts, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

func deleteRecordsReq(topic string, partition int32, offset int64) *kmsg.DeleteRecordsRequest {
	req := kmsg.NewPtrDeleteRecordsRequest()
	rt := kmsg.NewDeleteRecordsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewDeleteRecordsRequestTopicPartition()
	rp.Partition, rp.Offset = partition, offset
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

// TestInternalTopicsReadAsKafka: __consumer_offsets and __transaction_state, which
// Metadata lists with 50 partitions, answer the data APIs as Kafka's brokers do for a
// topic holding nothing (their records live in the coordinator's Postgres): Fetch
// (by name and by id) and ListOffsets find an empty log at offset 0, after waiting
// max_wait_ms; OffsetForLeaderEpoch ends epoch 0 at 0; Produce and DeleteRecords are
// INVALID_TOPIC_EXCEPTION (Kafka's ReplicaManager refuses appends and deletions on
// internal topics); a partition past 49 is UNKNOWN_TOPIC_OR_PARTITION.
func TestInternalTopicsReadAsKafka(t *testing.T) {
	e := newEnv(t, nil)
	for _, it := range []string{"__consumer_offsets", "__transaction_state"} {
		id := e.h.internalTopic(it, [16]byte{}).ID
		for _, c := range []struct {
			req  *kmsg.FetchRequest
			v    int16
			want int16
		}{
			{fetchReq(it, [16]byte{}, 0, 0), 12, 0},
			{fetchReq("", id, 49, 0), 13, 0},
			{fetchReq(it, [16]byte{}, 3, 1), 12, kerr.OffsetOutOfRange.Code},
			{fetchReq(it, [16]byte{}, 50, 0), 12, kerr.UnknownTopicOrPartition.Code},
		} {
			c.req.MaxWaitMillis = 200
			start := time.Now()
			p := e.do(t, c.req, c.v).(*kmsg.FetchResponse).Topics[0].Partitions[0]
			if p.ErrorCode != c.want || len(p.RecordBatches) != 0 {
				t.Errorf("%s: Fetch v%d partition %d: %s, %d bytes; want %s", it, c.v, p.Partition, code(p.ErrorCode), len(p.RecordBatches), code(c.want))
			}
			if c.want != kerr.UnknownTopicOrPartition.Code && (p.HighWatermark != 0 || p.LastStableOffset != 0 || p.LogStartOffset != 0) {
				t.Errorf("%s: Fetch partition %d offsets %d/%d/%d, want 0/0/0", it, p.Partition, p.HighWatermark, p.LastStableOffset, p.LogStartOffset)
			}
			if waited := time.Since(start); c.want == 0 && waited < 200*time.Millisecond {
				t.Errorf("%s: an empty Fetch answered after %v, before its max wait of 200ms", it, waited)
			}
		}
		for _, c := range []struct {
			ts, want int64
		}{{-1, 0}, {-2, 0}, {-4, 0}, {-3, -1}, {0, -1}} {
			p := e.do(t, listOffsetsReq(it, 7, c.ts), 8).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
			if p.ErrorCode != 0 || p.Offset != c.want || p.Timestamp != -1 {
				t.Errorf("%s: ListOffsets %d: %s offset %d timestamp %d, want offset %d", it, c.ts, code(p.ErrorCode), p.Offset, p.Timestamp, c.want)
			}
		}
		if p := e.do(t, listOffsetsReq(it, 50, -1), 8).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]; p.ErrorCode != kerr.UnknownTopicOrPartition.Code {
			t.Errorf("%s: ListOffsets partition 50: %s", it, code(p.ErrorCode))
		}
		ole := kmsg.NewPtrOffsetForLeaderEpochRequest()
		ot := kmsg.NewOffsetForLeaderEpochRequestTopic()
		ot.Topic = it
		op := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		op.LeaderEpoch, op.CurrentLeaderEpoch = 0, 0
		ot.Partitions = append(ot.Partitions, op)
		ole.Topics = append(ole.Topics, ot)
		if p := e.do(t, ole, 4).(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions[0]; p.ErrorCode != 0 || p.LeaderEpoch != 0 || p.EndOffset != 0 {
			t.Errorf("%s: OffsetForLeaderEpoch: %+v", it, p)
		}
		if p := e.produce(t, it, 0, fake.Batch("x")); p.ErrorCode != kerr.InvalidTopicException.Code {
			t.Errorf("%s: Produce: %s", it, code(p.ErrorCode))
		}
		for part, want := range map[int32]int16{0: kerr.InvalidTopicException.Code, 50: kerr.UnknownTopicOrPartition.Code} {
			if p := e.do(t, deleteRecordsReq(it, part, -1), 2).(*kmsg.DeleteRecordsResponse).Topics[0].Partitions[0]; p.ErrorCode != want || p.LowWatermark != -1 {
				t.Errorf("%s: DeleteRecords partition %d: %s low watermark %d, want %s", it, part, code(p.ErrorCode), p.LowWatermark, code(want))
			}
		}
	}
}

// TestInternalTopicsAuthorized: with the authorizer on, the internal topics need what
// any topic needs, checked first: READ to Fetch, DESCRIBE to ListOffsets, WRITE to
// Produce and DELETE to DeleteRecords (else TOPIC_AUTHORIZATION_FAILED); with READ a
// Fetch finds the empty log.
func TestInternalTopicsAuthorized(t *testing.T) {
	e := newAuthEnv(t)
	const co = "__consumer_offsets"
	fetch := func() kmsg.FetchResponseTopicPartition {
		req := fetchReq(co, [16]byte{}, 0, 0)
		return e.as(t, alice, req, 12).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	}
	denied := kerr.TopicAuthorizationFailed.Code
	if p := fetch(); p.ErrorCode != denied {
		t.Errorf("Fetch without READ: %s", code(p.ErrorCode))
	}
	if p := e.as(t, alice, listOffsetsReq(co, 0, -1), 8).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]; p.ErrorCode != denied {
		t.Errorf("ListOffsets without DESCRIBE: %s", code(p.ErrorCode))
	}
	e.acls.add(grant(kafkaacl.ResourceTopic, co, alice, kafkaacl.OpRead))
	e.h.InvalidateAcls()
	if p := fetch(); p.ErrorCode != 0 || p.HighWatermark != 0 {
		t.Errorf("Fetch with READ: %s, high watermark %d", code(p.ErrorCode), p.HighWatermark)
	}
	if p := e.as(t, alice, produceReq(co, 0, fake.Batch("x")), 11).(*kmsg.ProduceResponse).Topics[0].Partitions[0]; p.ErrorCode != denied {
		t.Errorf("Produce without WRITE: %s", code(p.ErrorCode))
	}
	if p := e.as(t, alice, deleteRecordsReq(co, 0, -1), 2).(*kmsg.DeleteRecordsResponse).Topics[0].Partitions[0]; p.ErrorCode != denied {
		t.Errorf("DeleteRecords without DELETE: %s", code(p.ErrorCode))
	}
}

// TestInternalTopicsNotDeleted: DeleteTopics naming an internal topic is
// TOPIC_DELETION_DISABLED from v3, INVALID_REQUEST at v1-2 (the code Kafka answers
// there when deletion is disabled); DELETE is checked first, as for any topic.
func TestInternalTopicsNotDeleted(t *testing.T) {
	e := newAuthEnv(t)
	const ts = "__transaction_state"
	del := func(v int16) int16 {
		req := kmsg.NewPtrDeleteTopicsRequest()
		req.TopicNames = []string{ts}
		return e.as(t, alice, req, v).(*kmsg.DeleteTopicsResponse).Topics[0].ErrorCode
	}
	if c := del(4); c != kerr.TopicAuthorizationFailed.Code {
		t.Errorf("DeleteTopics without DELETE: %s", code(c))
	}
	e.acls.add(grant(kafkaacl.ResourceTopic, ts, alice, kafkaacl.OpDelete))
	e.h.InvalidateAcls()
	for v, want := range map[int16]int16{1: kerr.InvalidRequest.Code, 2: kerr.InvalidRequest.Code, 3: kerr.TopicDeletionDisabled.Code, 5: kerr.TopicDeletionDisabled.Code} {
		if c := del(v); c != want {
			t.Errorf("DeleteTopics v%d: %s, want %s", v, code(c), code(want))
		}
	}
}
