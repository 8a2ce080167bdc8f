package handler

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/services/kafka-gateway/internal/fake"
)

// TestFetchCurrentLeaderEpoch: from v9, Fetch checks current_leader_epoch as Kafka's
// Partition.checkCurrentLeaderEpoch does against our leader epoch 0: -1 and 0 read,
// above is UNKNOWN_LEADER_EPOCH, below FENCED_LEADER_EPOCH, with no records and
// offsets -1, also for a fetch offset out of range; a partition that does not exist
// stays UNKNOWN_TOPIC_OR_PARTITION; before v9 the field does not exist. A request
// with such a partition is answered without waiting out max_wait_ms.
func TestFetchCurrentLeaderEpoch(t *testing.T) {
	e := newEnv(t, nil)
	e.createTopic(t, "fle", 1, nil)
	e.produce(t, "fle", 0, fake.Batch("a", "b"))
	fetch := func(v int16, epoch int32, partition int32, offset int64) kmsg.FetchResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis = 5000
		req.MinBytes = 1
		if v >= 9 && (epoch > 0 || epoch < -1) {
			req.MinBytes = 1 << 20 // never reached: only the error ends the wait early
		}
		req.MaxBytes = 1 << 20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "fle"
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.CurrentLeaderEpoch, rp.FetchOffset, rp.PartitionMaxBytes = partition, epoch, offset, 1<<20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		start := time.Now()
		resp := e.do(t, req, v).(*kmsg.FetchResponse)
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != 0 && time.Since(start) > 2*time.Second {
			t.Errorf("v%d epoch %d: the error %d took %v, want it at once", v, epoch, p.ErrorCode, time.Since(start))
		}
		return p
	}
	for _, v := range []int16{9, 11, 12} {
		for _, epoch := range []int32{-1, 0} {
			if p := fetch(v, epoch, 0, 0); p.ErrorCode != 0 || len(p.RecordBatches) == 0 || p.HighWatermark != 2 {
				t.Errorf("v%d epoch %d: %+v, want the records and high watermark 2", v, epoch, p)
			}
		}
		for _, c := range []struct {
			epoch  int32
			offset int64
			want   *kerr.Error
		}{{1, 0, kerr.UnknownLeaderEpoch}, {7, 99, kerr.UnknownLeaderEpoch}, {-2, 0, kerr.FencedLeaderEpoch}, {1, -5, kerr.UnknownLeaderEpoch}} {
			p := fetch(v, c.epoch, 0, c.offset)
			if p.ErrorCode != c.want.Code || len(p.RecordBatches) != 0 || p.HighWatermark != -1 || p.LogStartOffset != -1 {
				t.Errorf("v%d epoch %d offset %d: %+v, want %s with no records and offsets -1", v, c.epoch, c.offset, p, c.want.Message)
			}
		}
		if p := fetch(v, 1, 3, 0); p.ErrorCode != kerr.UnknownTopicOrPartition.Code {
			t.Errorf("v%d: partition 3 of 1 with epoch 1: error %d, want UNKNOWN_TOPIC_OR_PARTITION", v, p.ErrorCode)
		}
	}
	if p := fetch(8, 1, 0, 0); p.ErrorCode != 0 || len(p.RecordBatches) == 0 {
		t.Errorf("v8 (no current_leader_epoch): %+v, want the records", p)
	}
}
