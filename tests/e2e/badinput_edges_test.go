package e2e

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// resealBatch fixes the length and CRC-32C of a hand-edited batch.
func resealBatch(b []byte) []byte {
	binary.BigEndian.PutUint32(b[8:12], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[17:21], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// idempotentBatch is recordBatch with n records from producer pid at epoch, first
// sequence seq.
func idempotentBatch(pid int64, epoch int16, seq int32, n int) []byte {
	recs := make([]kv, n)
	for i := range recs {
		recs[i] = kv{nil, []byte("idem")}
	}
	b := recordBatch(recs)
	binary.BigEndian.PutUint64(b[43:], uint64(pid))
	binary.BigEndian.PutUint16(b[51:], uint16(epoch))
	binary.BigEndian.PutUint32(b[53:], uint32(seq))
	return resealBatch(b)
}

// deleteRecords sends one DeleteRecords for topic/partition at offset and returns the
// partition's error code and low watermark.
func deleteRecords(t *testing.T, req kmsg.Requestor, topic string, partition int32, offset int64) (int16, int64) {
	t.Helper()
	dr := kmsg.NewPtrDeleteRecordsRequest()
	dr.TimeoutMillis = 10000
	rt := kmsg.NewDeleteRecordsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewDeleteRecordsRequestTopicPartition()
	rp.Partition = partition
	rp.Offset = offset
	rt.Partitions = append(rt.Partitions, rp)
	dr.Topics = append(dr.Topics, rt)
	resp, err := dr.RequestWith(ctxT(t, 20*time.Second), req)
	if err != nil {
		t.Fatalf("DeleteRecords %s/%d before %d: %v", topic, partition, offset, err)
	}
	p := resp.Topics[0].Partitions[0]
	return p.ErrorCode, p.LowWatermark
}

// TestBadInputEdges: edge cases next to TestBadInput's: DeleteRecords below the log
// start (a no-op in Kafka, not an error), past the high watermark and below -1; null
// config values; idempotent sequences (duplicate, gap, fenced epoch) on raw batches;
// batches whose header disagrees with their records. Refused requests change nothing.
func TestBadInputEdges(t *testing.T) {
	s := sharedStack(t)
	addrs := s.KafkaAddrs
	adm := newAdmin(t, addrs)
	cl := newClient(t, addrs)

	t.Run("DeleteRecords", func(t *testing.T) {
		topic := topicName("delrec")
		createTopic(t, adm, topic, 1, nil)
		td := waitTopic(t, adm, topic, 1)
		leader := cl.Broker(int(td.Partitions[0].Leader))
		produceKeyed(t, cl, topic, "dr", 10)

		if code, low := deleteRecords(t, leader, topic, 0, 5); code != 0 || low != 5 {
			t.Fatalf("DeleteRecords before 5: %s low watermark %d, want NONE 5", codeName(code), low)
		}
		// Kafka (UnifiedLog.maybeIncrementLogStartOffset): the log start only moves
		// forward; the same or a lower offset is answered NONE with the current log start.
		for _, off := range []int64{5, 3, 0} {
			if code, low := deleteRecords(t, leader, topic, 0, off); code != 0 || low != 5 {
				t.Errorf("DeleteRecords before %d with log start 5: %s low watermark %d, want NONE 5", off, codeName(code), low)
			}
		}
		for _, off := range []int64{11, -2, -100} {
			if code, _ := deleteRecords(t, leader, topic, 0, off); code != kerr.OffsetOutOfRange.Code {
				t.Errorf("DeleteRecords before %d (high watermark 10): %s, want OFFSET_OUT_OF_RANGE", off, codeName(code))
			}
		}
		// kadm reports a repeated deletion as success too.
		res, err := adm.DeleteRecords(ctxT(t, 20*time.Second), kadm.Offsets{topic: {0: {Topic: topic, Partition: 0, At: 4}}})
		if err != nil {
			t.Fatalf("kadm DeleteRecords: %v", err)
		}
		if r, ok := res.Lookup(topic, 0); !ok || r.Err != nil || r.LowWatermark != 5 {
			t.Errorf("kadm DeleteRecords before 4 with log start 5: %+v, want low watermark 5", r)
		}
		starts, err := adm.ListStartOffsets(ctxT(t, 20*time.Second), topic)
		if err != nil {
			t.Fatalf("ListStartOffsets: %v", err)
		}
		if o, _ := starts.Lookup(topic, 0); o.Offset != 5 {
			t.Errorf("log start after the deletions: %d, want 5", o.Offset)
		}
		if got := endOffsets(t, adm, topic)[0]; got != 10 {
			t.Errorf("high watermark after the deletions: %d, want 10", got)
		}
	})

	// franz-go with idempotence off (needed for acks 0 and 1) writes producer id -1
	// with base sequence 0, which Kafka takes; it used to be refused INVALID_RECORD.
	t.Run("NonIdempotentKgo", func(t *testing.T) {
		topic := topicName("noidem")
		createTopic(t, adm, topic, 1, nil)
		for _, acks := range []kgo.Acks{kgo.NoAck(), kgo.LeaderAck(), kgo.AllISRAcks()} {
			pc := newClient(t, addrs, kgo.DefaultProduceTopic(topic), kgo.DisableIdempotentWrite(), kgo.RequiredAcks(acks))
			var rs []*kgo.Record
			for i := 0; i < 10; i++ {
				rs = append(rs, &kgo.Record{Value: []byte("v")})
			}
			if err := pc.ProduceSync(ctxT(t, 20*time.Second), rs...).FirstErr(); err != nil {
				t.Fatalf("non-idempotent produce with %v: %v", acks, err)
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		for endOffsets(t, adm, topic)[0] != 30 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond) // acks 0 answers before the append
		}
		if got := endOffsets(t, adm, topic)[0]; got != 30 {
			t.Fatalf("high watermark %d after 3 x 10 non-idempotent records, want 30", got)
		}
	})

	t.Run("TimestampLimits", func(t *testing.T) {
		topic := topicName("tslimits")
		minute := "60000"
		createTopic(t, adm, topic, 1, map[string]*string{"message.timestamp.before.max.ms": &minute, "message.timestamp.after.max.ms": &minute})
		pc := newClient(t, addrs, kgo.DefaultProduceTopic(topic), kgo.DisableIdempotentWrite(), kgo.RecordRetries(0))
		produceAt := func(ts time.Time) error {
			return pc.ProduceSync(ctxT(t, 20*time.Second), &kgo.Record{Value: []byte(ts.String()), Timestamp: ts}).FirstErr()
		}
		now := time.Now()
		for name, ts := range map[string]time.Time{"2 min ago": now.Add(-2 * time.Minute), "in 2 min": now.Add(2 * time.Minute)} {
			if err := produceAt(ts); !errors.Is(err, kerr.InvalidTimestamp) {
				t.Errorf("produce with a timestamp %s on a topic allowing 1 min: %v, want INVALID_TIMESTAMP", name, err)
			}
		}
		if err := produceAt(now); err != nil {
			t.Fatalf("produce with the current time: %v", err)
		}
		if got := endOffsets(t, adm, topic)[0]; got != 1 {
			t.Fatalf("high watermark %d, want 1: a refused batch was stored", got)
		}
		// Back to Kafka's default (Long.MAX_VALUE: no limit): an old timestamp is taken.
		rs, err := adm.AlterTopicConfigs(ctxT(t, 20*time.Second), []kadm.AlterConfig{{Op: kadm.DeleteConfig, Name: "message.timestamp.before.max.ms"}}, topic)
		if err != nil || rs[0].Err != nil {
			t.Fatalf("delete message.timestamp.before.max.ms: %v %v", err, rs)
		}
		if err := produceAt(now.Add(-2 * time.Minute)); err != nil {
			t.Fatalf("produce with an old timestamp after the limit was removed: %v", err)
		}
	})

	t.Run("NullConfigValues", func(t *testing.T) {
		name := topicName("nullcfg")
		req := kmsg.NewPtrCreateTopicsRequest()
		req.TimeoutMillis = 15000
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 1, -1
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name = "retention.ms" // null value
		rt.Configs = append(rt.Configs, c)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctxT(t, 30*time.Second), cl)
		if err != nil {
			t.Fatalf("CreateTopics: %v", err)
		}
		if got := resp.Topics[0].ErrorCode; got != kerr.InvalidConfig.Code {
			t.Errorf("CreateTopics with a null config value: %s, want INVALID_CONFIG", codeName(got))
		}
		if listed, err := adm.ListTopics(ctxT(t, 20*time.Second)); err != nil {
			t.Fatalf("ListTopics: %v", err)
		} else if listed.Has(name) {
			t.Errorf("topic %s was created despite a null config value", name)
		}

		topic := topicName("nullalter")
		createTopic(t, adm, topic, 1, nil)
		alter := kmsg.NewPtrIncrementalAlterConfigsRequest()
		res := kmsg.NewIncrementalAlterConfigsRequestResource()
		res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, topic
		set := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		set.Name, set.Op, set.Value = "retention.ms", kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr("1000")
		null := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		null.Name, null.Op = "cleanup.policy", kmsg.IncrementalAlterConfigOpSet
		res.Configs = append(res.Configs, set, null)
		alter.Resources = append(alter.Resources, res)
		ar, err := alter.RequestWith(ctxT(t, 30*time.Second), cl)
		if err != nil {
			t.Fatalf("IncrementalAlterConfigs: %v", err)
		}
		if got := ar.Resources[0].ErrorCode; got != kerr.InvalidRequest.Code {
			t.Errorf("IncrementalAlterConfigs SET with a null value: %s, want INVALID_REQUEST", codeName(got))
		}
		cfgs, err := adm.DescribeTopicConfigs(ctxT(t, 20*time.Second), topic)
		if err != nil {
			t.Fatalf("DescribeConfigs: %v", err)
		}
		rc, err := cfgs.On(topic, nil)
		if err != nil {
			t.Fatalf("DescribeConfigs %s: %v", topic, err)
		}
		for _, e := range rc.Configs {
			if e.Key == "retention.ms" && e.Source != kmsg.ConfigSourceDefaultConfig {
				t.Errorf("retention.ms changed by a refused IncrementalAlterConfigs: %v (%v)", e.MaybeValue(), e.Source)
			}
			if e.Key == "cleanup.policy" && e.MaybeValue() != "delete" {
				t.Errorf("cleanup.policy = %q after a refused null SET, want delete", e.MaybeValue())
			}
		}
	})

	t.Run("IdempotentSequences", func(t *testing.T) {
		topic := topicName("idem")
		createTopic(t, adm, topic, 1, nil)
		td := waitTopic(t, adm, topic, 1)
		leader := td.Partitions[0].Leader
		ipr, err := kmsg.NewPtrInitProducerIDRequest().RequestWith(ctxT(t, 20*time.Second), cl)
		if err != nil || ipr.ErrorCode != 0 {
			t.Fatalf("InitProducerId: %v %s", err, codeName(ipr.ErrorCode))
		}
		pid, epoch := ipr.ProducerID, ipr.ProducerEpoch
		steps := []struct {
			name       string
			epoch      int16
			seq        int32
			n          int
			code       int16
			baseOffset int64
		}{
			{"first batch", epoch, 0, 3, 0, 0},
			{"retry of the first batch", epoch, 0, 3, 0, 0},
			{"next batch", epoch, 3, 2, 0, 3},
			{"late retry of the first batch", epoch, 0, 3, 0, 0},
			{"retry of the second batch", epoch, 3, 2, 0, 3},
			{"sequence gap", epoch, 9, 1, kerr.OutOfOrderSequenceNumber.Code, -1},
			{"overlapping sequence", epoch, 4, 2, kerr.OutOfOrderSequenceNumber.Code, -1},
			{"new epoch not at sequence 0", epoch + 1, 5, 1, kerr.OutOfOrderSequenceNumber.Code, -1},
			{"new epoch", epoch + 1, 0, 1, 0, 5},
			{"old epoch", epoch, 5, 1, kerr.InvalidProducerEpoch.Code, -1},
		}
		for _, st := range steps {
			code, off := rawProduce(t, cl, leader, td, 0, idempotentBatch(pid, st.epoch, st.seq, st.n))
			if code != st.code || (code == 0 && off != st.baseOffset) {
				t.Errorf("%s (epoch %d, sequence %d): %s at offset %d, want %s at %d", st.name, st.epoch, st.seq, codeName(code), off, codeName(st.code), st.baseOffset)
			}
		}
		if got := endOffsets(t, adm, topic)[0]; got != 6 {
			t.Errorf("high watermark %d after the idempotent batches, want 6", got)
		}
	})

	t.Run("BatchHeaderLies", func(t *testing.T) {
		topic := topicName("lies")
		createTopic(t, adm, topic, 1, nil)
		td := waitTopic(t, adm, topic, 1)
		leader := td.Partitions[0].Leader
		produceKeyed(t, cl, topic, "lies", 4)
		before := snapshot(consumeAll(t, addrs, topic))
		good := recordBatch([]kv{{nil, []byte("a")}, {nil, []byte("b")}})
		cases := []struct {
			name string
			edit func([]byte) []byte
			want []int16
		}{
			{"last offset delta 5 for 2 records", func(b []byte) []byte { binary.BigEndian.PutUint32(b[23:], 5); return resealBatch(b) }, []int16{kerr.CorruptMessage.Code, kerr.InvalidRecord.Code}},
			{"record count 3 for 2 records", func(b []byte) []byte { binary.BigEndian.PutUint32(b[57:], 3); return resealBatch(b) }, []int16{kerr.CorruptMessage.Code, kerr.InvalidRecord.Code}},
			{"record count 0", func(b []byte) []byte { binary.BigEndian.PutUint32(b[57:], 0); return resealBatch(b) }, []int16{kerr.CorruptMessage.Code, kerr.InvalidRecord.Code}},
			{"compression codec 7", func(b []byte) []byte { b[22] |= 7; return resealBatch(b) }, []int16{kerr.UnsupportedCompressionType.Code, kerr.CorruptMessage.Code}},
			{"gzip flag on plain records", func(b []byte) []byte { b[22] |= 1; return resealBatch(b) }, []int16{kerr.CorruptMessage.Code}},
			{"zstd flag on plain records", func(b []byte) []byte { b[22] |= 4; return resealBatch(b) }, []int16{kerr.CorruptMessage.Code}},
			{"bytes after the last record", func(b []byte) []byte { return resealBatch(append(b, 1, 2, 3)) }, []int16{kerr.CorruptMessage.Code, kerr.InvalidRecord.Code}},
			// Producer id -5 is not a lie: Kafka takes it as "no producer id"
			// (RepeatsEpochsProducerIDs).
			{"header only", func(b []byte) []byte { return resealBatch(b[:61]) }, []int16{kerr.CorruptMessage.Code, kerr.InvalidRecord.Code}},
		}
		for _, c := range cases {
			code, _ := rawProduce(t, cl, leader, td, 0, c.edit(append([]byte(nil), good...)))
			ok := false
			for _, w := range c.want {
				ok = ok || code == w
			}
			if !ok {
				t.Errorf("produce of a batch with %s: %s, want one of %v", c.name, codeName(code), c.want)
			}
		}
		if got := endOffsets(t, adm, topic)[0]; got != 4 {
			t.Errorf("high watermark %d after refused batches, want 4", got)
		}
		if after := snapshot(consumeAll(t, addrs, topic)); !reflect.DeepEqual(before, after) {
			t.Errorf("records of %s changed after refused batches", topic)
		}
	})
	// Kafka 4.x answers to repeated partitions, null records, current leader epochs and
	// producer ids below -1 (KafkaApis, ListOffsetsRequest, Partition, RecordBatch).
	t.Run("RepeatsEpochsProducerIDs", func(t *testing.T) {
		topic := topicName("repeats")
		createTopic(t, adm, topic, 1, nil)
		td := waitTopic(t, adm, topic, 1)
		leader := cl.Broker(int(td.Partitions[0].Leader))

		// Partition 0 listed twice: appended once, with the later entry's records.
		req := kmsg.NewPtrProduceRequest()
		req.Acks, req.TimeoutMillis = -1, 10000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = topic
		for _, n := range []int{1, 3} {
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Records = idempotentBatch(-1, -1, -1, n)
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctxT(t, 30*time.Second), leader)
		if err != nil {
			t.Fatalf("produce with a repeated partition: %v", err)
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 || resp.Topics[0].Partitions[0].ErrorCode != 0 {
			t.Fatalf("produce with a repeated partition: %+v, want one successful answer", resp.Topics)
		}
		if got := endOffsets(t, adm, topic)[0]; got != 3 {
			t.Fatalf("high watermark %d after a produce listing partition 0 twice (1 then 3 records), want 3", got)
		}

		if code, _ := rawProduce(t, cl, td.Partitions[0].Leader, td, 0, nil); code != kerr.InvalidRecord.Code {
			t.Errorf("null records: %s, want INVALID_RECORD", codeName(code))
		}

		// Producer id -5 is no producer id (Kafka: hasProducerId is id > -1): taken as
		// sent, twice, without de-duplication.
		for i := 0; i < 2; i++ {
			if code, _ := rawProduce(t, cl, td.Partitions[0].Leader, td, 0, idempotentBatch(-5, 0, 0, 1)); code != 0 {
				t.Errorf("producer id -5, batch %d: %s, want NONE", i, codeName(code))
			}
		}
		if got := endOffsets(t, adm, topic)[0]; got != 5 {
			t.Errorf("high watermark %d after two batches with producer id -5, want 5", got)
		}

		lo := func(parts []int32, epoch int32) *kmsg.ListOffsetsResponse {
			t.Helper()
			req := kmsg.NewPtrListOffsetsRequest()
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = topic
			for _, p := range parts {
				rp := kmsg.NewListOffsetsRequestTopicPartition()
				rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = p, -1, epoch
				rt.Partitions = append(rt.Partitions, rp)
			}
			req.Topics = append(req.Topics, rt)
			resp, err := req.RequestWith(ctxT(t, 20*time.Second), leader)
			if err != nil {
				t.Fatalf("ListOffsets: %v", err)
			}
			return resp
		}
		if r := lo([]int32{0, 0}, -1); len(r.Topics) != 1 || len(r.Topics[0].Partitions) != 1 || r.Topics[0].Partitions[0].ErrorCode != kerr.InvalidRequest.Code {
			t.Errorf("ListOffsets with partition 0 twice: %+v, want one INVALID_REQUEST", r.Topics)
		}
		for _, c := range []struct {
			epoch int32
			want  int16
		}{{0, 0}, {1, kerr.UnknownLeaderEpoch.Code}, {-5, kerr.FencedLeaderEpoch.Code}} {
			if p := lo([]int32{0}, c.epoch).Topics[0].Partitions[0]; p.ErrorCode != c.want || (c.want == 0 && p.Offset != 5) {
				t.Errorf("ListOffsets with current leader epoch %d: %s offset %d, want %s", c.epoch, codeName(p.ErrorCode), p.Offset, codeName(c.want))
			}
		}
	})
}
