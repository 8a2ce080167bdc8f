package handler

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tributary/tributary/libs/channel"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	"github.com/tributary/tributary/services/kafka-gateway/internal/fake"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type env struct {
	h     *Handler
	st    *fake.Storage
	co    *fake.Coordinator
	chain TurnChain
}

func newEnv(t *testing.T, mod func(*Config)) *env {
	t.Helper()
	st := fake.NewStorage()
	co := fake.NewCoordinator(st)
	cfg := Config{NodeID: 1, ClusterID: "unit", AutoCreateTopics: true, DefaultPartitions: 1}
	if mod != nil {
		mod(&cfg)
	}
	brokers := []Broker{{NodeID: 1, Host: "127.0.0.1", Port: 9092}, {NodeID: 2, Host: "127.0.0.1", Port: 9093}}
	h := New(cfg, Deps{Storage: st, Coordinator: co, Brokers: func() []Broker { return brokers }, Log: zaptest.NewLogger(t)})
	return &env{h: h, st: st, co: co}
}

// do handles req at version v and returns the response.
func (e *env) do(t *testing.T, req kmsg.Request, v int16) kmsg.Response {
	t.Helper()
	req.SetVersion(v)
	r := &Request{Body: req}
	if req.Key() == kmsg.Produce.Int16() {
		r.Turn = e.chain.Next()
		defer r.Turn.Finish()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.h.Handle(ctx, r)
	if err != nil {
		t.Fatalf("%s v%d: %v", kmsg.NameForKey(req.Key()), v, err)
	}
	if resp != nil {
		// Every answer must encode and decode at the request's version.
		b := resp.AppendTo(nil)
		dec := req.ResponseKind()
		dec.SetVersion(v)
		if err := dec.ReadFrom(b); err != nil {
			t.Fatalf("%s v%d response does not decode: %v", kmsg.NameForKey(req.Key()), v, err)
		}
	}
	return resp
}

func (e *env) createTopic(t *testing.T, name string, partitions int32, configs map[string]string) *kmsg.CreateTopicsResponseTopic {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, -1
	for k, v := range configs {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = k, &v
		rt.Configs = append(rt.Configs, c)
	}
	req.Topics = append(req.Topics, rt)
	resp := e.do(t, req, 7).(*kmsg.CreateTopicsResponse)
	return &resp.Topics[0]
}

func produceReq(topic string, partition int32, records []byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = partition, records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

func (e *env) produce(t *testing.T, topic string, partition int32, records []byte) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	resp := e.do(t, produceReq(topic, partition, records), 11).(*kmsg.ProduceResponse)
	return resp.Topics[0].Partitions[0]
}

func fetchReq(topic string, id [16]byte, partition int32, offset int64) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis = 10
	req.MinBytes = 1
	req.MaxBytes = 1 << 20
	req.SessionEpoch = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = topic, id
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = partition, offset, 1<<20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

func code(c int16) string {
	if err := kerr.ErrorForCode(c); err != nil {
		return err.Error()
	}
	return "NONE"
}

func TestCreateTopicsErrors(t *testing.T) {
	e := newEnv(t, nil)
	for _, name := range []string{"a~b", "..", ".", strings.Repeat("x", 250), "a b", "a/b", "", "ü"} {
		if got := e.createTopic(t, name, 1, nil).ErrorCode; got != kerr.InvalidTopicException.Code {
			t.Errorf("create %q: %s, want INVALID_TOPIC_EXCEPTION", name, code(got))
		}
	}
	for _, n := range []int32{0, 257, -5} {
		if got := e.createTopic(t, "parts", n, nil).ErrorCode; got != kerr.InvalidPartitions.Code {
			t.Errorf("create with %d partitions: %s, want INVALID_PARTITIONS", n, code(got))
		}
	}
	if got := e.createTopic(t, strings.Repeat("y", 249), 1, nil); got.ErrorCode != 0 || got.NumPartitions != 1 || got.TopicID == ([16]byte{}) {
		t.Errorf("create 249-char topic: %+v", got)
	}
	if got := e.createTopic(t, "dflt", -1, nil); got.ErrorCode != 0 || got.NumPartitions != 1 {
		t.Errorf("create with -1 partitions: %+v", got)
	}
	if got := e.createTopic(t, "dflt", 1, nil).ErrorCode; got != kerr.TopicAlreadyExists.Code {
		t.Errorf("create twice: %s", code(got))
	}
	// KRaft's metadata log: Kafka's ControllerApis.createTopics prohibits the name.
	if got := e.createTopic(t, "__cluster_metadata", 1, nil); got.ErrorCode != kerr.InvalidRequest.Code || got.ErrorMessage == nil ||
		*got.ErrorMessage != "Creation of internal topic __cluster_metadata is prohibited." {
		t.Errorf("create __cluster_metadata: %s %v, want INVALID_REQUEST", code(got.ErrorCode), got.ErrorMessage)
	}

	req := kmsg.NewPtrCreateTopicsRequest()
	for _, rf := range []int16{3, 1, -1} {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "rf"+string(rune('a'+rf+1)), 1, rf
		req.Topics = append(req.Topics, rt)
	}
	dup := kmsg.NewCreateTopicsRequestTopic()
	dup.Topic, dup.NumPartitions, dup.ReplicationFactor = "dup", 1, 1
	req.Topics = append(req.Topics, dup, dup)
	resp := e.do(t, req, 4).(*kmsg.CreateTopicsResponse)
	want := []int16{kerr.InvalidReplicationFactor.Code, 0, 0, kerr.InvalidRequest.Code, kerr.InvalidRequest.Code}
	for i, w := range want {
		if resp.Topics[i].ErrorCode != w {
			t.Errorf("topic %d (%s): %s, want %s", i, resp.Topics[i].Topic, code(resp.Topics[i].ErrorCode), code(w))
		}
	}
}

func TestProduceErrors(t *testing.T) {
	e := newEnv(t, nil)
	e.createTopic(t, "t", 3, nil)
	e.createTopic(t, "small", 1, map[string]string{"max.message.bytes": "1024"})

	good := fake.Batch("a", "b")
	if p := e.produce(t, "t", 0, good); p.ErrorCode != 0 || p.BaseOffset != 0 || p.LogStartOffset != 0 || p.LogAppendTime != -1 {
		t.Fatalf("good produce: %+v", p)
	}
	if p := e.produce(t, "t", 0, fake.Batch("c")); p.ErrorCode != 0 || p.BaseOffset != 2 {
		t.Fatalf("second produce: %+v", p)
	}

	bad := fake.Batch("x")
	bad[20] ^= 0xff
	short := good[:len(good)-3]
	cases := []struct {
		name  string
		topic string
		part  int32
		recs  []byte
		want  int16
	}{
		{"bad crc", "t", 0, bad, kerr.CorruptMessage.Code},
		{"truncated", "t", 0, short, kerr.CorruptMessage.Code},
		// Kafka: "must have at least one record batch per partition" (INVALID_RECORD).
		{"null records", "t", 0, nil, kerr.InvalidRecord.Code},
		{"empty records", "t", 0, []byte{}, kerr.InvalidRecord.Code},
		{"too large", "small", 0, fake.Batch(strings.Repeat("z", 4096)), kerr.MessageTooLarge.Code},
		{"unknown partition", "t", 7, good, kerr.UnknownTopicOrPartition.Code},
		{"negative partition", "t", -1, good, kerr.UnknownTopicOrPartition.Code},
		{"tilde", "a~1", 0, good, kerr.InvalidTopicException.Code},
		{"dotdot", "..", 0, good, kerr.InvalidTopicException.Code},
		{"long", strings.Repeat("q", 250), 0, good, kerr.InvalidTopicException.Code},
		{"bad char", "a$b", 0, good, kerr.InvalidTopicException.Code},
		{"two batches", "t", 0, append(fake.Batch("d"), fake.Batch("e")...), kerr.InvalidRecord.Code},
	}
	for _, c := range cases {
		if p := e.produce(t, c.topic, c.part, c.recs); p.ErrorCode != c.want {
			t.Errorf("%s: %s, want %s", c.name, code(p.ErrorCode), code(c.want))
		}
	}
	magic1 := fake.Batch("m")
	magic1[16] = 1
	if p := e.produce(t, "t", 0, magic1); p.ErrorCode != kerr.InvalidRecord.Code {
		t.Errorf("magic 1: %s", code(p.ErrorCode))
	}
	txn := fake.Batch("txn")
	binary.BigEndian.PutUint16(txn[21:], 0x10)
	binary.BigEndian.PutUint32(txn[17:21], crc32.Checksum(txn[21:], crc32.MakeTable(crc32.Castagnoli)))
	if p := e.produce(t, "t", 0, txn); p.ErrorCode != kerr.InvalidTxnState.Code {
		t.Errorf("transactional batch: %s", code(p.ErrorCode))
	}
	// A batch whose transactional bit came from damage is corrupt, not transactional.
	txn[20] ^= 0xff
	if p := e.produce(t, "t", 0, txn); p.ErrorCode != kerr.CorruptMessage.Code {
		t.Errorf("transactional batch with a bad CRC: %s", code(p.ErrorCode))
	}
	if got := e.st.HighWatermark("kafka.t"); got != 3 {
		t.Errorf("after rejected produces the high watermark is %d, want 3", got)
	}

	// acks, versions, transactional id.
	req := produceReq("t", 1, good)
	req.Acks = 2
	if p := e.do(t, req, 9).(*kmsg.ProduceResponse).Topics[0].Partitions[0]; p.ErrorCode != kerr.InvalidRequiredAcks.Code {
		t.Errorf("acks=2: %s", code(p.ErrorCode))
	}
	for v := int16(0); v < 3; v++ {
		if p := e.do(t, produceReq("t", 1, good), v).(*kmsg.ProduceResponse).Topics[0].Partitions[0]; p.ErrorCode != kerr.UnsupportedVersion.Code {
			t.Errorf("produce v%d: %s, want UNSUPPORTED_VERSION", v, code(p.ErrorCode))
		}
	}
	// A transactional id with batches that are not transactional: the plain path.
	req = produceReq("t", 1, good)
	tid := "tx"
	req.TransactionID = &tid
	if p := e.do(t, req, 9).(*kmsg.ProduceResponse).Topics[0].Partitions[0]; p.ErrorCode != 0 {
		t.Errorf("transactional id with a plain batch: %s", code(p.ErrorCode))
	}
	req = produceReq("t", 1, good)
	req.Acks = 0
	if resp := e.do(t, req, 9); resp != nil {
		t.Errorf("acks=0 produced a response: %+v", resp)
	}
	if got := e.st.HighWatermark("kafka.t~1"); got != 4 {
		t.Errorf("acks=0 write: high watermark %d, want 4 (two batches of two records)", got)
	}
	req = produceReq("t", 9, good)
	req.Acks = 0
	req.SetVersion(9)
	r := &Request{Body: req, Turn: e.chain.Next()}
	resp, err := e.h.Handle(context.Background(), r)
	r.Turn.Finish()
	if resp != nil || !errors.Is(err, ErrAcksZeroFailed) {
		t.Errorf("failed acks=0 produce: %v %v, want connection close", resp, err)
	}
}

func TestProduceAutoCreateAndDisabled(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.DefaultPartitions = 2 })
	if p := e.produce(t, "auto", 1, fake.Batch("x")); p.ErrorCode != 0 || p.BaseOffset != 0 {
		t.Fatalf("auto-create produce: %+v", p)
	}
	if hw := e.st.HighWatermark("kafka.auto~1"); hw != 1 {
		t.Fatalf("auto-created partition 1 high watermark %d", hw)
	}
	off := newEnv(t, func(c *Config) { c.AutoCreateTopics = false })
	if p := off.produce(t, "nope", 0, fake.Batch("x")); p.ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("produce to unknown topic, auto-create off: %s", code(p.ErrorCode))
	}
}

func TestProduceOutages(t *testing.T) {
	e := newEnv(t, nil)
	e.createTopic(t, "t", 1, nil)
	for _, c := range []struct {
		err  error
		want int16
	}{
		{status.Error(codes.Unavailable, "down"), kerr.NotLeaderForPartition.Code},
		{status.Error(codes.DeadlineExceeded, "slow"), kerr.RequestTimedOut.Code},
		{status.Error(codes.Internal, "bug"), kerr.KafkaStorageError.Code},
		{errors.New("plain"), kerr.KafkaStorageError.Code},
	} {
		e.st.SetFailure(c.err)
		if p := e.produce(t, "t", 0, fake.Batch("x")); p.ErrorCode != c.want {
			t.Errorf("storage %v: %s, want %s", c.err, code(p.ErrorCode), code(c.want))
		}
	}
	e.st.SetFailure(nil)

	// Coordinator down: cached topic still works; an uncached one goes to storage.
	e.co.SetFailure(status.Error(codes.Unavailable, "down"))
	if p := e.produce(t, "t", 0, fake.Batch("x")); p.ErrorCode != 0 {
		t.Errorf("coordinator down, cached topic: %s", code(p.ErrorCode))
	}
	e.h.InvalidateTopic("")
	if p := e.produce(t, "t", 0, fake.Batch("x")); p.ErrorCode != 0 {
		t.Errorf("coordinator down, uncached existing topic: %s", code(p.ErrorCode))
	}
	if p := e.produce(t, "missing", 0, fake.Batch("x")); p.ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Errorf("coordinator down, missing topic: %s", code(p.ErrorCode))
	}
}

func TestFetch(t *testing.T) {
	e := newEnv(t, nil)
	ct := e.createTopic(t, "f", 2, nil)
	e.produce(t, "f", 0, fake.Batch("a", "b", "c"))

	for _, v := range []int16{4, 11, 12} {
		resp := e.do(t, fetchReq("f", [16]byte{}, 0, 0), v).(*kmsg.FetchResponse)
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != 0 || p.HighWatermark != 3 || p.LastStableOffset != 3 || p.LogStartOffset != 0 || len(p.RecordBatches) == 0 {
			t.Errorf("fetch v%d from 0: %+v", v, p)
		}
		if resp.SessionID != 0 || p.AbortedTransactions != nil {
			t.Errorf("fetch v%d: session %d aborted %v", v, resp.SessionID, p.AbortedTransactions)
		}
	}
	// At the high watermark: empty, no error.
	p := e.do(t, fetchReq("f", [16]byte{}, 0, 3), 12).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	if p.ErrorCode != 0 || len(p.RecordBatches) != 0 || p.HighWatermark != 3 {
		t.Errorf("fetch at HWM: %+v", p)
	}
	if p.RecordBatches == nil {
		t.Errorf("fetch at HWM: null records (librdkafka wants an empty record set)")
	}
	// Past it: OFFSET_OUT_OF_RANGE with the offsets filled.
	p = e.do(t, fetchReq("f", [16]byte{}, 0, 13), 12).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	if p.ErrorCode != kerr.OffsetOutOfRange.Code || p.HighWatermark != 3 || p.LogStartOffset != 0 || p.RecordBatches == nil {
		t.Errorf("fetch past HWM: %+v", p)
	}
	// v13+: by topic id.
	p = e.do(t, fetchReq("", ct.TopicID, 0, 1), 16).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	if p.ErrorCode != 0 || len(p.RecordBatches) == 0 {
		t.Errorf("fetch v16 by id: %+v", p)
	}
	resp := e.do(t, fetchReq("", [16]byte{1, 2, 3}, 0, 0), 13).(*kmsg.FetchResponse)
	if p := resp.Topics[0].Partitions[0]; p.ErrorCode != kerr.UnknownTopicID.Code || p.HighWatermark != -1 || p.LogStartOffset != -1 {
		t.Errorf("fetch v13 unknown id: %+v", p)
	}
	// Unknown partition / topic.
	p = e.do(t, fetchReq("f", [16]byte{}, 9, 0), 12).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	if p.ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Errorf("fetch unknown partition: %s", code(p.ErrorCode))
	}
	// read_committed: empty aborted list.
	req := fetchReq("f", [16]byte{}, 0, 0)
	req.IsolationLevel = 1
	p = e.do(t, req, 12).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	if p.ErrorCode != 0 || p.AbortedTransactions == nil || len(p.AbortedTransactions) != 0 {
		t.Errorf("read_committed fetch: %+v", p)
	}
	// Sessions we never handed out.
	req = fetchReq("f", [16]byte{}, 0, 0)
	req.SessionID = 42
	if r := e.do(t, req, 12).(*kmsg.FetchResponse); r.ErrorCode != kerr.FetchSessionIDNotFound.Code {
		t.Errorf("unknown session: %s", code(r.ErrorCode))
	}
	// Storage down: retriable, offsets -1.
	e.st.SetFailure(status.Error(codes.Unavailable, "down"))
	p = e.do(t, fetchReq("f", [16]byte{}, 0, 0), 12).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	if p.ErrorCode != kerr.NotLeaderForPartition.Code || p.HighWatermark != -1 {
		t.Errorf("fetch with storage down: %+v", p)
	}
}

func TestFetchLongPollWakes(t *testing.T) {
	e := newEnv(t, nil)
	e.createTopic(t, "lp", 1, nil)
	req := fetchReq("lp", [16]byte{}, 0, 0)
	req.MaxWaitMillis = 10000
	got := make(chan kmsg.FetchResponseTopicPartition, 1)
	go func() {
		req.SetVersion(12)
		resp, err := e.h.Handle(context.Background(), &Request{Body: req})
		if err != nil {
			got <- kmsg.FetchResponseTopicPartition{ErrorCode: -2}
			return
		}
		got <- resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]
	}()
	// Produce until the fetch returns (the fetch may start after the first produce).
	for {
		e.produce(t, "lp", 0, fake.Batch("wake"))
		select {
		case p := <-got:
			if p.ErrorCode != 0 || len(p.RecordBatches) == 0 {
				t.Fatalf("long poll: %+v", p)
			}
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func TestListOffsets(t *testing.T) {
	e := newEnv(t, nil)
	e.createTopic(t, "lo", 1, nil)
	before := time.Now().UnixMilli()
	e.produce(t, "lo", 0, fake.Batch("a", "b"))
	e.produce(t, "lo", 0, fake.Batch("c"))

	ask := func(ts int64, v int16) kmsg.ListOffsetsResponseTopicPartition {
		req := kmsg.NewPtrListOffsetsRequest()
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "lo"
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp = ts
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return e.do(t, req, v).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
	}
	if p := ask(-1, 10); p.Offset != 3 || p.ErrorCode != 0 || p.LeaderEpoch != 0 {
		t.Errorf("latest: %+v", p)
	}
	if p := ask(-2, 1); p.Offset != 0 {
		t.Errorf("earliest: %+v", p)
	}
	if p := ask(-4, 8); p.Offset != 0 {
		t.Errorf("earliest local: %+v", p)
	}
	if p := ask(-3, 7); p.Offset < 0 || p.Timestamp < before {
		t.Errorf("max timestamp: %+v", p)
	}
	if p := ask(before-1000, 5); p.Offset != 0 || p.Timestamp < before {
		t.Errorf("by old timestamp: %+v", p)
	}
	if p := ask(time.Now().Add(time.Hour).UnixMilli(), 5); p.Offset != -1 || p.Timestamp != -1 || p.ErrorCode != 0 {
		t.Errorf("by future timestamp: %+v", p)
	}
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = "none"
	rt.Partitions = append(rt.Partitions, kmsg.NewListOffsetsRequestTopicPartition())
	req.Topics = append(req.Topics, rt)
	if p := e.do(t, req, 6).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]; p.ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Errorf("unknown topic: %s", code(p.ErrorCode))
	}
}

// TestListOffsetsLatestTieredUnknownPartition: latest-tiered (-5, KIP-1005) answers
// offset -1 only for a partition that exists (nothing is tiered); for an unknown topic
// or partition it is UNKNOWN_TOPIC_OR_PARTITION as for every other timestamp, since
// Kafka's ReplicaManager looks the partition up before it looks at the timestamp.
func TestListOffsetsLatestTieredUnknownPartition(t *testing.T) {
	e := newEnv(t, nil)
	e.createTopic(t, "lt", 1, nil)
	ask := func(topic string, partition int32) kmsg.ListOffsetsResponseTopicPartition {
		req := kmsg.NewPtrListOffsetsRequest()
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = partition, -5, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return e.do(t, req, 9).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
	}
	if p := ask("lt", 0); p.ErrorCode != 0 || p.Offset != -1 || p.Timestamp != -1 {
		t.Errorf("latest tiered of lt/0: %s offset %d timestamp %d, want NONE -1 -1", code(p.ErrorCode), p.Offset, p.Timestamp)
	}
	for _, c := range []struct {
		topic string
		part  int32
	}{{"lt", 3}, {"missing", 0}} {
		if p := ask(c.topic, c.part); p.ErrorCode != kerr.UnknownTopicOrPartition.Code {
			t.Errorf("latest tiered of %s/%d: %s, want UNKNOWN_TOPIC_OR_PARTITION", c.topic, c.part, code(p.ErrorCode))
		}
	}
}

func TestMetadata(t *testing.T) {
	e := newEnv(t, nil)
	ct := e.createTopic(t, "m", 6, nil)

	req := kmsg.NewPtrMetadataRequest()
	for _, n := range []string{"m", "new", "bad~name"} {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(n)
		req.Topics = append(req.Topics, mt)
	}
	req.AllowAutoTopicCreation = false
	resp := e.do(t, req, 12).(*kmsg.MetadataResponse)
	if len(resp.Brokers) != 2 || resp.ControllerID != 1 || resp.ClusterID == nil || *resp.ClusterID != KafkaClusterID("unit") {
		t.Errorf("brokers %+v controller %d cluster %v", resp.Brokers, resp.ControllerID, resp.ClusterID)
	}
	m := resp.Topics[0]
	if m.ErrorCode != 0 || m.TopicID != ct.TopicID || len(m.Partitions) != 6 {
		t.Fatalf("topic m: %+v", m)
	}
	leaders := map[int32]int{}
	for _, p := range m.Partitions {
		leaders[p.Leader]++
		if len(p.Replicas) != 1 || p.Replicas[0] != p.Leader || len(p.ISR) != 1 || p.LeaderEpoch != 0 {
			t.Errorf("partition %+v", p)
		}
	}
	if leaders[1] != 3 || leaders[2] != 3 {
		t.Errorf("leaders not spread: %v", leaders)
	}
	if resp.Topics[1].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Errorf("unknown topic without auto-create: %s", code(resp.Topics[1].ErrorCode))
	}
	if resp.Topics[2].ErrorCode != kerr.InvalidTopicException.Code {
		t.Errorf("invalid topic: %s", code(resp.Topics[2].ErrorCode))
	}
	// Auto-create when allowed.
	req.AllowAutoTopicCreation = true
	resp = e.do(t, req, 9).(*kmsg.MetadataResponse)
	if resp.Topics[1].ErrorCode != 0 || len(resp.Topics[1].Partitions) != 1 {
		t.Errorf("auto-created topic: %+v", resp.Topics[1])
	}
	// All topics (v0 empty list, v1+ null).
	// Kafka's internal topics are listed too, is_internal set, never created.
	all := kmsg.NewPtrMetadataRequest()
	all.Topics = nil
	allResp := e.do(t, all, 12).(*kmsg.MetadataResponse)
	if got := len(allResp.Topics); got != 2+len(channel.KafkaInternalTopics) {
		t.Errorf("all topics: %d", got)
	}
	internal := map[string]kmsg.MetadataResponseTopic{}
	for _, mt := range allResp.Topics {
		if mt.IsInternal {
			internal[*mt.Topic] = mt
		}
	}
	co, ok := internal["__consumer_offsets"]
	if len(internal) != len(channel.KafkaInternalTopics) || !ok || len(co.Partitions) != 50 || co.TopicID == [16]byte{} {
		t.Errorf("internal topics listed: %+v", internal)
	}
	all.Topics = []kmsg.MetadataRequestTopic{}
	if got := len(e.do(t, all, 0).(*kmsg.MetadataResponse).Topics); got != 2+len(channel.KafkaInternalTopics) {
		t.Errorf("all topics v0: %d", got)
	}
	named := kmsg.NewPtrMetadataRequest()
	named.AllowAutoTopicCreation = true
	nt := kmsg.NewMetadataRequestTopic()
	nt.Topic = kmsg.StringPtr("__consumer_offsets")
	named.Topics = append(named.Topics, nt)
	if mt := e.do(t, named, 12).(*kmsg.MetadataResponse).Topics[0]; mt.ErrorCode != 0 || !mt.IsInternal || mt.TopicID != co.TopicID {
		t.Errorf("__consumer_offsets by name: %+v", mt)
	}
	if r := e.createTopic(t, "__consumer_offsets", 3, nil); r.ErrorCode != kerr.TopicAlreadyExists.Code {
		t.Errorf("CreateTopics __consumer_offsets: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	if p := e.produce(t, "__consumer_offsets", 0, fake.Batch("x")); p.ErrorCode != kerr.InvalidTopicException.Code {
		t.Errorf("Produce to __consumer_offsets: %v", kerr.ErrorForCode(p.ErrorCode))
	}
	nt.Topic, nt.TopicID = nil, co.TopicID
	named.Topics[0] = nt
	if mt := e.do(t, named, 12).(*kmsg.MetadataResponse).Topics[0]; mt.ErrorCode != 0 || !mt.IsInternal || mt.Topic == nil || *mt.Topic != "__consumer_offsets" {
		t.Errorf("__consumer_offsets by id: %+v", mt)
	}
	// By id (v10+).
	byID := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.TopicID = ct.TopicID
	byID.Topics = append(byID.Topics, mt)
	if got := e.do(t, byID, 12).(*kmsg.MetadataResponse).Topics[0]; got.Topic == nil || *got.Topic != "m" {
		t.Errorf("by id: %+v", got)
	}
	// Coordinator down: retriable.
	e.co.SetFailure(status.Error(codes.Unavailable, "down"))
	e.h.InvalidateTopic("")
	if got := e.do(t, req, 12).(*kmsg.MetadataResponse).Topics[0]; got.ErrorCode != kerr.LeaderNotAvailable.Code {
		t.Errorf("coordinator down: %s", code(got.ErrorCode))
	}
}

// TestMetadataDuplicateTopics: a topic named (or asked by id) several times in one
// Metadata request is answered once, as Kafka's handleTopicMetadataRequest answers the
// set of the requested topics: a small request repeating a topic with many partitions
// must not cost a response (and gateway memory) of that size times the repetitions.
func TestMetadataDuplicateTopics(t *testing.T) {
	e := newEnv(t, nil)
	e.createTopic(t, "wide", 64, nil)
	id := e.createTopic(t, "other", 2, nil).TopicID
	req := kmsg.NewPtrMetadataRequest()
	for _, n := range []string{"wide", "wide", "missing", "wide", "missing"} {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(n)
		req.Topics = append(req.Topics, mt)
	}
	got := e.do(t, req, 12).(*kmsg.MetadataResponse).Topics
	if len(got) != 2 || *got[0].Topic != "wide" || len(got[0].Partitions) != 64 || *got[1].Topic != "missing" ||
		got[1].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Errorf("Metadata naming wide 3 times and missing twice: %d topics answered, want wide then missing once each", len(got))
	}
	byID := kmsg.NewPtrMetadataRequest()
	for i := 0; i < 3; i++ {
		mt := kmsg.NewMetadataRequestTopic()
		mt.TopicID = id
		byID.Topics = append(byID.Topics, mt)
	}
	if got := e.do(t, byID, 12).(*kmsg.MetadataResponse).Topics; len(got) != 1 || got[0].Topic == nil || *got[0].Topic != "other" {
		t.Errorf("Metadata asking one topic id 3 times: %d topics answered, want other once", len(got))
	}
}

// TestInternalTopicsAsKafka4: every topic Kafka 4's Topic.isInternal names
// (__consumer_offsets, __transaction_state and KIP-932's __share_group_state) is listed
// with is_internal, exists already for CreateTopics, and refuses appends (Kafka's
// ReplicaManager: INVALID_TOPIC_EXCEPTION) instead of being auto-created as a user
// topic by the first Produce or Metadata naming it.
func TestInternalTopicsAsKafka4(t *testing.T) {
	e := newEnv(t, nil)
	for _, name := range []string{"__consumer_offsets", "__transaction_state", "__share_group_state"} {
		if p := e.produce(t, name, 0, fake.Batch("x")); p.ErrorCode != kerr.InvalidTopicException.Code {
			t.Errorf("Produce to %s: %s, want INVALID_TOPIC_EXCEPTION", name, code(p.ErrorCode))
		}
		if r := e.createTopic(t, name, 1, nil); r.ErrorCode != kerr.TopicAlreadyExists.Code {
			t.Errorf("CreateTopics %s: %s, want TOPIC_ALREADY_EXISTS", name, code(r.ErrorCode))
		}
		req := kmsg.NewPtrMetadataRequest()
		req.AllowAutoTopicCreation = true
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(name)
		req.Topics = append(req.Topics, mt)
		got := e.do(t, req, 12).(*kmsg.MetadataResponse).Topics[0]
		if got.ErrorCode != 0 || !got.IsInternal || got.TopicID == [16]byte{} {
			t.Errorf("Metadata %s: %s internal=%v id=%x, want an internal topic", name, code(got.ErrorCode), got.IsInternal, got.TopicID)
		}
	}
}

func TestTopicCacheRefreshAfterPartitionGrowth(t *testing.T) {
	e := newEnv(t, nil)
	e.createTopic(t, "g", 1, nil)
	if p := e.produce(t, "g", 0, fake.Batch("x")); p.ErrorCode != 0 {
		t.Fatal(code(p.ErrorCode))
	}
	req := kmsg.NewPtrCreatePartitionsRequest()
	rt := kmsg.NewCreatePartitionsRequestTopic()
	rt.Topic, rt.Count = "g", 3
	req.Topics = append(req.Topics, rt)
	if r := e.do(t, req, 3).(*kmsg.CreatePartitionsResponse); r.Topics[0].ErrorCode != 0 {
		t.Fatalf("create partitions: %s", code(r.Topics[0].ErrorCode))
	}
	if p := e.produce(t, "g", 2, fake.Batch("x")); p.ErrorCode != 0 {
		t.Fatalf("produce to new partition: %s", code(p.ErrorCode))
	}
	rt.Count = 2
	req.Topics[0] = rt
	if r := e.do(t, req, 0).(*kmsg.CreatePartitionsResponse); r.Topics[0].ErrorCode != kerr.InvalidPartitions.Code {
		t.Fatalf("shrink: %s", code(r.Topics[0].ErrorCode))
	}
}

func TestDeleteTopics(t *testing.T) {
	e := newEnv(t, nil)
	a := e.createTopic(t, "da", 1, nil)
	e.createTopic(t, "db", 1, nil)
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.Topics = append(req.Topics, []kmsg.DeleteTopicsRequestTopic{{TopicID: a.TopicID}, {Topic: kmsg.StringPtr("db")}, {Topic: kmsg.StringPtr("zz")}, {TopicID: [16]byte{9}}}...)
	resp := e.do(t, req, 6).(*kmsg.DeleteTopicsResponse)
	want := []int16{0, 0, kerr.UnknownTopicOrPartition.Code, kerr.UnknownTopicID.Code}
	for i, w := range want {
		if resp.Topics[i].ErrorCode != w {
			t.Errorf("delete %d: %s, want %s", i, code(resp.Topics[i].ErrorCode), code(w))
		}
	}
	if resp.Topics[0].Topic == nil || *resp.Topics[0].Topic != "da" {
		t.Errorf("delete by id names %v", resp.Topics[0].Topic)
	}
	old := kmsg.NewPtrDeleteTopicsRequest()
	old.TopicNames = []string{"da"}
	if r := e.do(t, old, 1).(*kmsg.DeleteTopicsResponse); r.Topics[0].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Errorf("delete again: %s", code(r.Topics[0].ErrorCode))
	}
}

// TestDeleteTopicsDuplicates: as Kafka's ControllerApis.deleteTopics, a topic named (or
// asked by id) twice is answered once with INVALID_REQUEST and is not deleted; a row
// with both a name and an id, or neither, is INVALID_REQUEST; the other rows are
// served.
func TestDeleteTopicsDuplicates(t *testing.T) {
	e := newEnv(t, nil)
	e.createTopic(t, "dup", 1, nil)
	byID := e.createTopic(t, "dupid", 1, nil).TopicID
	both := e.createTopic(t, "both", 1, nil).TopicID
	e.createTopic(t, "gone", 1, nil)
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.Topics = []kmsg.DeleteTopicsRequestTopic{
		{Topic: kmsg.StringPtr("dup")}, {TopicID: byID}, {Topic: kmsg.StringPtr("gone")},
		{Topic: kmsg.StringPtr("dup")}, {TopicID: byID}, {Topic: kmsg.StringPtr("both"), TopicID: both}, {},
	}
	resp := e.do(t, req, 6).(*kmsg.DeleteTopicsResponse)
	got := map[string]int16{}
	for _, rt := range resp.Topics {
		k := fmt.Sprintf("%x", rt.TopicID)
		if rt.Topic != nil {
			k = *rt.Topic
		}
		if _, seen := got[k]; seen {
			t.Errorf("%s answered twice", k)
		}
		got[k] = rt.ErrorCode
	}
	want := map[string]int16{
		"dup": kerr.InvalidRequest.Code, fmt.Sprintf("%x", byID): kerr.InvalidRequest.Code, "gone": 0,
		"both": kerr.InvalidRequest.Code, fmt.Sprintf("%x", [16]byte{}): kerr.InvalidRequest.Code,
	}
	for k, w := range want {
		if c, ok := got[k]; !ok || c != w {
			t.Errorf("DeleteTopics row %s: %s (answered %v), want %s", k, code(c), ok, code(w))
		}
	}
	meta := kmsg.NewPtrMetadataRequest()
	for _, n := range []string{"dup", "dupid", "both", "gone"} {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(n)
		meta.Topics = append(meta.Topics, mt)
	}
	for _, mt := range e.do(t, meta, 12).(*kmsg.MetadataResponse).Topics {
		if exists := mt.ErrorCode == 0; exists != (*mt.Topic != "gone") {
			t.Errorf("after DeleteTopics, %s: %s", *mt.Topic, code(mt.ErrorCode))
		}
	}
}

func TestDeleteRecordsAndOffsetForLeaderEpoch(t *testing.T) {
	e := newEnv(t, nil)
	e.createTopic(t, "dr", 1, nil)
	e.produce(t, "dr", 0, fake.Batch("a", "b", "c", "d"))
	del := func(off int64) kmsg.DeleteRecordsResponseTopicPartition {
		req := kmsg.NewPtrDeleteRecordsRequest()
		rt := kmsg.NewDeleteRecordsRequestTopic()
		rt.Topic = "dr"
		rp := kmsg.NewDeleteRecordsRequestTopicPartition()
		rp.Offset = off
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return e.do(t, req, 2).(*kmsg.DeleteRecordsResponse).Topics[0].Partitions[0]
	}
	if p := del(2); p.ErrorCode != 0 || p.LowWatermark != 2 {
		t.Errorf("delete before 2: %+v", p)
	}
	if p := del(9); p.ErrorCode != kerr.OffsetOutOfRange.Code {
		t.Errorf("delete past HWM: %s", code(p.ErrorCode))
	}
	if p := del(1); p.ErrorCode != 0 || p.LowWatermark != 2 {
		t.Errorf("delete before 1 with log start 2 (Kafka: no-op, low watermark 2): %+v", p)
	}
	if p := del(-2); p.ErrorCode != kerr.OffsetOutOfRange.Code {
		t.Errorf("delete before -2: %s", code(p.ErrorCode))
	}
	if p := del(-1); p.ErrorCode != 0 || p.LowWatermark != 4 {
		t.Errorf("delete all: %+v", p)
	}
	p := e.do(t, fetchReq("dr", [16]byte{}, 0, 0), 12).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	if p.ErrorCode != kerr.OffsetOutOfRange.Code || p.LogStartOffset != 4 {
		t.Errorf("fetch below log start: %+v", p)
	}

	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = "dr"
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.LeaderEpoch = 0
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	for _, v := range []int16{2, 3, 4} {
		got := e.do(t, req, v).(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions[0]
		if got.ErrorCode != 0 || got.LeaderEpoch != 0 || got.EndOffset != 4 {
			t.Errorf("v%d: %+v", v, got)
		}
	}
}

func TestConfigs(t *testing.T) {
	e := newEnv(t, nil)
	e.createTopic(t, "c", 1, map[string]string{"retention.ms": "1000"})

	alter := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = resourceTopic, "c"
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Op, c.Value = "max.message.bytes", 0, kmsg.StringPtr("2048")
	res.Configs = append(res.Configs, c)
	broker := kmsg.NewIncrementalAlterConfigsRequestResource()
	broker.ResourceType, broker.ResourceName = resourceBroker, "1"
	alter.Resources = append(alter.Resources, res, broker)
	ar := e.do(t, alter, 1).(*kmsg.IncrementalAlterConfigsResponse)
	if ar.Resources[0].ErrorCode != 0 || ar.Resources[1].ErrorCode != kerr.InvalidRequest.Code {
		t.Errorf("alter: %+v", ar.Resources)
	}

	desc := kmsg.NewPtrDescribeConfigsRequest()
	desc.IncludeSynonyms, desc.IncludeDocumentation = true, true
	for _, r := range []struct {
		typ  kmsg.ConfigResourceType
		name string
	}{{resourceTopic, "c"}, {resourceTopic, "missing"}, {resourceTopic, "bad~"}, {resourceBroker, "1"}, {resourceBroker, "77"}} {
		dr := kmsg.NewDescribeConfigsRequestResource()
		dr.ResourceType, dr.ResourceName = r.typ, r.name
		desc.Resources = append(desc.Resources, dr)
	}
	for _, v := range []int16{1, 4} {
		resp := e.do(t, desc, v).(*kmsg.DescribeConfigsResponse)
		vals := map[string]string{}
		for _, cfg := range resp.Resources[0].Configs {
			vals[cfg.Name] = *cfg.Value
		}
		if vals["max.message.bytes"] != "2048" || vals["retention.ms"] != "1000" || vals["cleanup.policy"] != "delete" {
			t.Errorf("v%d topic configs: %v", v, vals)
		}
		want := []int16{0, kerr.UnknownTopicOrPartition.Code, kerr.InvalidTopicException.Code, 0, kerr.InvalidRequest.Code}
		for i, w := range want {
			if resp.Resources[i].ErrorCode != w {
				t.Errorf("v%d resource %d: %s, want %s", v, i, code(resp.Resources[i].ErrorCode), code(w))
			}
		}
		if len(resp.Resources[3].Configs) == 0 {
			t.Errorf("v%d: no broker configs", v)
		}
	}
}

func TestInitProducerIDAndDescribeCluster(t *testing.T) {
	e := newEnv(t, nil)
	for _, v := range []int16{0, 2, 4, 5} {
		req := kmsg.NewPtrInitProducerIDRequest()
		r := e.do(t, req, v).(*kmsg.InitProducerIDResponse)
		if r.ErrorCode != 0 || r.ProducerID <= 0 || r.ProducerEpoch != 0 {
			t.Errorf("v%d: %+v", v, r)
		}
	}
	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionalID = kmsg.StringPtr("")
	if r := e.do(t, req, 4).(*kmsg.InitProducerIDResponse); r.ErrorCode != kerr.InvalidRequest.Code {
		t.Errorf("empty transactional id: %s", code(r.ErrorCode))
	}
	e.co.SetFailure(status.Error(codes.Unavailable, "down"))
	if r := e.do(t, kmsg.NewPtrInitProducerIDRequest(), 4).(*kmsg.InitProducerIDResponse); r.ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Errorf("coordinator down: %s", code(r.ErrorCode))
	}

	dc := kmsg.NewPtrDescribeClusterRequest()
	dc.EndpointType = 1
	r := e.do(t, dc, 1).(*kmsg.DescribeClusterResponse)
	if r.ErrorCode != 0 || len(r.Brokers) != 2 || r.ControllerID != 1 || r.ClusterID != KafkaClusterID("unit") {
		t.Errorf("describe cluster: %+v", r)
	}
	dc.EndpointType = 2
	if r := e.do(t, dc, 1).(*kmsg.DescribeClusterResponse); r.ErrorCode != kerr.UnsupportedEndpointType.Code {
		t.Errorf("controllers endpoint: %s", code(r.ErrorCode))
	}
}

func TestAPIVersionsFromRegistrations(t *testing.T) {
	e := newEnv(t, nil)
	resp := e.do(t, apiVersionsV3(), 3).(*kmsg.ApiVersionsResponse)
	got := map[int16][2]int16{}
	for _, k := range resp.ApiKeys {
		got[k.ApiKey] = [2]int16{k.MinVersion, k.MaxVersion}
	}
	want := map[int16][2]int16{8: {2, 9}, 9: {1, 9}, 11: {2, 9}, 12: {0, 4}, 13: {0, 5}, 14: {0, 5}, 15: {0, 6}, 16: {0, 5}, 42: {0, 2}, 47: {0, 0}, 0: {0, 12}, 1: {4, 16}, 10: {0, 6}, 2: {1, 10}, 3: {0, 13}, 18: {0, 4}, 19: {2, 7}, 20: {1, 6}, 21: {0, 2}, 22: {0, 5}, 23: {2, 4}, 24: {0, 5}, 25: {0, 4}, 26: {0, 5}, 27: {0, 2}, 28: {0, 5}, 61: {0, 0}, 65: {0, 0}, 66: {0, 1}, 68: {0, 1}, 69: {0, 1}, 76: {1, 1}, 77: {1, 1}, 90: {0, 1}, 91: {0, 0}, 92: {0, 0}, 78: {1, 2}, 79: {1, 2}, 32: {1, 4}, 33: {0, 2}, 37: {0, 3}, 44: {0, 1}, 60: {0, 2},
		29: {1, 3}, 30: {1, 3}, 31: {1, 3}, 17: {0, 1}, 36: {0, 2}, 50: {0, 0}, 51: {0, 0}}
	if len(got) != len(want) {
		t.Errorf("advertised %v, want %v", got, want)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("key %d: %v, want %v", k, got[k], w)
		}
		// kmsg must support every advertised version.
		req := kmsg.RequestForKey(k)
		if req.MaxVersion() < w[1] {
			t.Errorf("key %d advertised up to %d but kmsg stops at %d", k, w[1], req.MaxVersion())
		}
	}
	u := UnsupportedAPIVersions()
	if u.Version != 0 || u.ErrorCode != kerr.UnsupportedVersion.Code || len(u.ApiKeys) != len(want) {
		t.Errorf("unsupported answer: %+v", u)
	}
}

func TestStorageCodeTable(t *testing.T) {
	for c := range storageCodes {
		if storageCode(c) == kerr.UnknownServerError.Code {
			t.Errorf("%v maps to UNKNOWN_SERVER_ERROR", c)
		}
	}
	if got := storageCode(999); got != kerr.KafkaStorageError.Code {
		t.Errorf("unknown storage code: %d", got)
	}
}

func TestProduceSeesPartitionsAddedElsewhere(t *testing.T) {
	e := newEnv(t, nil)
	e.createTopic(t, "grow", 1, nil)
	if p := e.produce(t, "grow", 0, fake.Batch("x")); p.ErrorCode != 0 {
		t.Fatal(code(p.ErrorCode))
	}
	// Grow through the coordinator directly (another replica), no invalidation here.
	if _, err := e.co.CreatePartitions(context.Background(), &coordinatorv1.CreatePartitionsRequest{Topics: []*coordinatorv1.PartitionGrowth{{Name: "grow", Count: 2}}}); err != nil {
		t.Fatal(err)
	}
	if p := e.produce(t, "grow", 1, fake.Batch("x")); p.ErrorCode != 0 {
		t.Fatalf("produce to a partition added through another replica: %s", code(p.ErrorCode))
	}
}

func TestStaleTopicsServeWhileCoordinatorDown(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.TopicCacheTTL = time.Nanosecond })
	ct := e.createTopic(t, "stale", 2, nil)
	e.produce(t, "stale", 1, fake.Batch("x"))
	e.co.SetFailure(status.Error(codes.Unavailable, "down"))

	req := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr("stale")
	req.Topics = append(req.Topics, mt)
	if got := e.do(t, req, 12).(*kmsg.MetadataResponse).Topics[0]; got.ErrorCode != 0 || len(got.Partitions) != 2 {
		t.Errorf("metadata from an expired cache entry while the coordinator is down: %+v", got)
	}
	p := e.do(t, fetchReq("", ct.TopicID, 1, 0), 13).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	if p.ErrorCode != 0 || len(p.RecordBatches) == 0 {
		t.Errorf("fetch by id while the coordinator is down: %+v", p)
	}
	if p := e.produce(t, "stale", 1, fake.Batch("y")); p.ErrorCode != 0 || p.BaseOffset != 1 {
		t.Errorf("produce while the coordinator is down: %+v", p)
	}
}

// TestNullConfigValues: a null config value is refused as Kafka refuses it, and nothing
// is created or changed: CreateTopics INVALID_CONFIG (ReplicationControlManager),
// IncrementalAlterConfigs SET/APPEND/SUBTRACT INVALID_REQUEST (ConfigAdminManager);
// DELETE needs no value.
func TestNullConfigValues(t *testing.T) {
	e := newEnv(t, nil)

	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "nullcfg", 1, -1
	c := kmsg.NewCreateTopicsRequestTopicConfig()
	c.Name = "retention.ms" // Value nil
	rt.Configs = append(rt.Configs, c)
	req.Topics = append(req.Topics, rt)
	for _, v := range []int16{2, 7} {
		resp := e.do(t, req, v).(*kmsg.CreateTopicsResponse)
		if got := resp.Topics[0].ErrorCode; got != kerr.InvalidConfig.Code {
			t.Errorf("v%d CreateTopics with a null retention.ms: %s, want INVALID_CONFIG", v, code(got))
		}
	}
	md := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr("nullcfg")
	md.Topics = append(md.Topics, mt)
	if got := e.do(t, md, 9).(*kmsg.MetadataResponse).Topics[0].ErrorCode; got != kerr.UnknownTopicOrPartition.Code {
		t.Errorf("topic created despite a null config: metadata %s", code(got))
	}

	e.createTopic(t, "c", 1, map[string]string{"retention.ms": "1000"})
	for _, op := range []kmsg.IncrementalAlterConfigOp{kmsg.IncrementalAlterConfigOpSet, kmsg.IncrementalAlterConfigOpAppend, kmsg.IncrementalAlterConfigOpSubtract} {
		alter := kmsg.NewPtrIncrementalAlterConfigsRequest()
		res := kmsg.NewIncrementalAlterConfigsRequestResource()
		res.ResourceType, res.ResourceName = resourceTopic, "c"
		ok := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		ok.Name, ok.Op, ok.Value = "max.message.bytes", kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr("2048")
		null := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		null.Name, null.Op = "cleanup.policy", op
		res.Configs = append(res.Configs, ok, null)
		alter.Resources = append(alter.Resources, res)
		ar := e.do(t, alter, 1).(*kmsg.IncrementalAlterConfigsResponse)
		if got := ar.Resources[0].ErrorCode; got != kerr.InvalidRequest.Code {
			t.Errorf("op %v with a null value: %s, want INVALID_REQUEST", op, code(got))
		}
	}
	del := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = resourceTopic, "c"
	dc := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	dc.Name, dc.Op = "retention.ms", kmsg.IncrementalAlterConfigOpDelete
	res.Configs = append(res.Configs, dc)
	del.Resources = append(del.Resources, res)
	if got := e.do(t, del, 1).(*kmsg.IncrementalAlterConfigsResponse).Resources[0].ErrorCode; got != 0 {
		t.Errorf("DELETE with a null value: %s, want NONE", code(got))
	}

	desc := kmsg.NewPtrDescribeConfigsRequest()
	dr := kmsg.NewDescribeConfigsRequestResource()
	dr.ResourceType, dr.ResourceName = resourceTopic, "c"
	desc.Resources = append(desc.Resources, dr)
	vals := map[string]string{}
	for _, cfg := range e.do(t, desc, 4).(*kmsg.DescribeConfigsResponse).Resources[0].Configs {
		vals[cfg.Name] = *cfg.Value
	}
	if vals["max.message.bytes"] != "1048588" || vals["cleanup.policy"] != "delete" || vals["retention.ms"] != "604800000" {
		t.Errorf("configs after the refused alterations and the DELETE: %v", vals)
	}
}

// apiVersionsV3 is an ApiVersions request naming its software as a v3+ client must
// (KIP-511).
func apiVersionsV3() *kmsg.ApiVersionsRequest {
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName, req.ClientSoftwareVersion = "unit-test", "1.0.0"
	return req
}

// TestAPIVersionsSoftwareNames: a v3+ ApiVersions whose client software name or version
// breaks KIP-511's pattern gets INVALID_REQUEST and no keys, as Kafka answers; v0-2
// carry no names and a valid pair is served.
func TestAPIVersionsSoftwareNames(t *testing.T) {
	e := newEnv(t, nil)
	for _, c := range []struct {
		name, version string
		ok            bool
	}{
		{"librdkafka", "2.3.0", true}, {"kgo", "v1.22.3", true}, {"apache-kafka-java", "4.1.0-SNAPSHOT", true},
		{"a", "1", true}, {"", "1.0", false}, {"kgo", "", false}, {"-kgo", "1", false}, {"kgo.", "1", false},
		{"k go", "1", false}, {"kgo", "1.0 beta", false}, {"kgö", "1", false}, {"kgo", "(devel)", false}, {"kgo\x00", "1", false},
	} {
		req := kmsg.NewPtrApiVersionsRequest()
		req.ClientSoftwareName, req.ClientSoftwareVersion = c.name, c.version
		for v := int16(0); v <= 4; v++ {
			resp := e.do(t, req, v).(*kmsg.ApiVersionsResponse)
			valid := c.ok || v < 3
			if valid && (resp.ErrorCode != 0 || len(resp.ApiKeys) == 0) {
				t.Errorf("v%d %q %q: error %s, %d keys; want served", v, c.name, c.version, code(resp.ErrorCode), len(resp.ApiKeys))
			}
			if !valid && (resp.ErrorCode != kerr.InvalidRequest.Code || len(resp.ApiKeys) != 0) {
				t.Errorf("v%d %q %q: error %s, %d keys; want INVALID_REQUEST and none", v, c.name, c.version, code(resp.ErrorCode), len(resp.ApiKeys))
			}
		}
	}
}
