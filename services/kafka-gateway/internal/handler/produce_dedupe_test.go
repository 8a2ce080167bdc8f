package handler

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/services/kafka-gateway/internal/fake"
)

// produceTopics builds a produce request from topic entries, each a topic name and its
// partitions' records, in order; a topic may be listed more than once.
func produceTopics(entries ...produceEntry) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = 5000
	for _, e := range entries {
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = e.topic
		for _, p := range e.parts {
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Partition, rp.Records = p.part, p.recs
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	return req
}

type produceEntry struct {
	topic string
	parts []producePart
}

type producePart struct {
	part int32
	recs []byte
}

// TestProduceDuplicatePartition: Kafka (KafkaApis.handleProduceRequest) collects a
// produce's partitions in a map keyed by topic-partition, so a partition listed twice
// is appended once, with the later entry's records, and answered once.
func TestProduceDuplicatePartition(t *testing.T) {
	e := newEnv(t, nil)
	e.createTopic(t, "d", 2, nil)

	for _, v := range []int16{3, 9, 12} {
		before0, before1 := e.st.HighWatermark("kafka.d"), e.st.HighWatermark("kafka.d~1")
		req := produceTopics(
			produceEntry{"d", []producePart{{0, fake.Batch("a")}, {1, fake.Batch("x")}, {0, fake.Batch("b", "c")}}},
			produceEntry{"d", []producePart{{0, fake.Batch("d", "e", "f")}}},
		)
		resp := e.do(t, req, v).(*kmsg.ProduceResponse)
		if len(resp.Topics) != 1 || resp.Topics[0].Topic != "d" || len(resp.Topics[0].Partitions) != 2 {
			t.Fatalf("v%d: want one topic with partitions 0 and 1, got %+v", v, resp.Topics)
		}
		p0, p1 := resp.Topics[0].Partitions[0], resp.Topics[0].Partitions[1]
		if p0.Partition != 0 || p0.ErrorCode != 0 || p0.BaseOffset != before0 {
			t.Errorf("v%d partition 0: %+v, want base offset %d", v, p0, before0)
		}
		if p1.Partition != 1 || p1.ErrorCode != 0 || p1.BaseOffset != before1 {
			t.Errorf("v%d partition 1: %+v, want base offset %d", v, p1, before1)
		}
		// Only the last entry for partition 0 (three records) is stored.
		if got := e.st.HighWatermark("kafka.d"); got != before0+3 {
			t.Errorf("v%d: partition 0 high watermark %d, want %d (appended once, last entry)", v, got, before0+3)
		}
		if got := e.st.HighWatermark("kafka.d~1"); got != before1+1 {
			t.Errorf("v%d: partition 1 high watermark %d, want %d", v, got, before1+1)
		}
	}

	// The last entry decides: when it is invalid, nothing is appended for the partition.
	before := e.st.HighWatermark("kafka.d")
	req := produceTopics(produceEntry{"d", []producePart{{0, fake.Batch("g")}, {0, nil}}})
	resp := e.do(t, req, 11).(*kmsg.ProduceResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("want one answer for partition 0, got %+v", resp.Topics)
	}
	if p := resp.Topics[0].Partitions[0]; p.ErrorCode != kerr.InvalidRecord.Code || p.BaseOffset != -1 {
		t.Errorf("last entry null: %+v, want INVALID_RECORD", p)
	}
	if got := e.st.HighWatermark("kafka.d"); got != before {
		t.Errorf("last entry null: high watermark %d, want %d (nothing appended)", got, before)
	}
}
