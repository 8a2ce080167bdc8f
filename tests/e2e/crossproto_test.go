package e2e

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// dialGRPC dials a service's gRPC API in plaintext, as an outside user would; the
// connection closes when the test ends.
func dialGRPC(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// storageClient dials storage-core's gRPC API as an outside user would.
func storageClient(t testing.TB, addr string) storagev1.StorageServiceClient {
	t.Helper()
	return storagev1.NewStorageServiceClient(dialGRPC(t, addr))
}

// TestKafkaToNativeSubscribe: records produced with kgo to a 2-partition topic are
// read through storage-core Subscribe on kafka.<topic> and kafka.<topic>~1 with the
// same keys, values, headers, timestamps, and sequence = offset + 1.
func TestKafkaToNativeSubscribe(t *testing.T) {
	s := sharedStack(t)
	topic := topicName("cross")
	createTopic(t, newAdmin(t, s.KafkaAddrs), topic, 2, nil)

	cl := newClient(t, s.KafkaAddrs, kgo.DefaultProduceTopic(topic))
	var recs []*kgo.Record
	for i := 0; i < 400; i++ {
		r := &kgo.Record{
			Key:     fmt.Appendf(nil, "key-%d", i),
			Value:   fmt.Appendf(nil, "value-%d", i),
			Headers: []kgo.RecordHeader{{Key: "h1", Value: fmt.Appendf(nil, "hv-%d", i)}, {Key: "empty", Value: []byte{}}},
		}
		if i%50 == 0 {
			r.Key = nil // null key
		}
		recs = append(recs, r)
	}
	if err := cl.ProduceSync(ctxT(t, 60*time.Second), recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	byPart := map[int32][]*kgo.Record{}
	for _, r := range recs {
		byPart[r.Partition] = append(byPart[r.Partition], r)
	}
	if len(byPart) != 2 {
		t.Fatalf("records on %d partitions, want 2", len(byPart))
	}

	st := storageClient(t, s.StorageAddr)
	// A live subscription on partition 1, started before more records are produced.
	liveCtx := ctxT(t, 30*time.Second)
	live, err := st.Subscribe(liveCtx, &storagev1.SubscribeRequest{Channel: channel.KafkaPartition(topic, 1), Start: &storagev1.SubscribeRequest_New{New: true}})
	if err != nil {
		t.Fatalf("Subscribe new: %v", err)
	}
	for p := int32(0); p < 2; p++ {
		ch := channel.KafkaPartition(topic, p)
		want := byPart[p]
		ctx := ctxT(t, 30*time.Second)
		stream, err := st.Subscribe(ctx, &storagev1.SubscribeRequest{Channel: ch, Start: &storagev1.SubscribeRequest_First{First: true}})
		if err != nil {
			t.Fatalf("Subscribe %s: %v", ch, err)
		}
		var got []*storagev1.Record
		for len(got) < len(want) {
			msg, err := stream.Recv()
			if err != nil {
				t.Fatalf("Subscribe %s: after %d of %d records: %v", ch, len(got), len(want), err)
			}
			got = append(got, msg.Records...)
		}
		if len(got) != len(want) {
			t.Fatalf("Subscribe %s: %d records, want %d", ch, len(got), len(want))
		}
		for i, g := range got {
			w := want[i]
			if g.Sequence != w.Offset+1 {
				t.Fatalf("%s record %d: sequence %d, want offset+1 = %d", ch, i, g.Sequence, w.Offset+1)
			}
			if (g.Key == nil) != (w.Key == nil) || !bytes.Equal(g.Key, w.Key) || !bytes.Equal(g.Value, w.Value) {
				t.Fatalf("%s seq %d: key/value %q/%q (key nil %v), want %q/%q (key nil %v)", ch, g.Sequence, g.Key, g.Value, g.Key == nil, w.Key, w.Value, w.Key == nil)
			}
			if g.TimestampMs != w.Timestamp.UnixMilli() {
				t.Fatalf("%s seq %d: timestamp %d, want %d", ch, g.Sequence, g.TimestampMs, w.Timestamp.UnixMilli())
			}
			if len(g.Headers) != len(w.Headers) {
				t.Fatalf("%s seq %d: %d headers, want %d", ch, g.Sequence, len(g.Headers), len(w.Headers))
			}
			for j, h := range g.Headers {
				if h.Key != w.Headers[j].Key || !bytes.Equal(h.Value, w.Headers[j].Value) {
					t.Fatalf("%s seq %d: header %d = %q:%q, want %q:%q", ch, g.Sequence, j, h.Key, h.Value, w.Headers[j].Key, w.Headers[j].Value)
				}
			}
			if g.ProducerId < 0 {
				t.Errorf("%s seq %d: producer_id %d; kgo's idempotent producer wrote it", ch, g.Sequence, g.ProducerId)
			}
		}
	}

	// Records produced now reach the live subscription, and only those.
	later := &kgo.Record{Partition: 1, Value: []byte("live")}
	pcl := newClient(t, s.KafkaAddrs, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := pcl.ProduceSync(ctxT(t, 20*time.Second), later).FirstErr(); err != nil {
		t.Fatalf("produce live record: %v", err)
	}
	msg, err := live.Recv()
	if err != nil {
		t.Fatalf("live Subscribe: %v", err)
	}
	if len(msg.Records) == 0 || string(msg.Records[0].Value) != "live" || msg.Records[0].Sequence != later.Offset+1 {
		t.Fatalf("live Subscribe got %v, want the record produced after it started (offset %d)", msg.Records, later.Offset)
	}
}

// TestNativeAppendToKafka: a storage-core Append to kafka.<topic>~1 of a topic created
// through Kafka is read by a kgo consumer with the right key, value, headers,
// timestamp and offset (sequence - 1); partition 0 stays empty.
func TestNativeAppendToKafka(t *testing.T) {
	s := sharedStack(t)
	topic := topicName("native")
	adm := newAdmin(t, s.KafkaAddrs)
	createTopic(t, adm, topic, 2, nil)

	st := storageClient(t, s.StorageAddr)
	ts := time.Now().Add(-time.Minute).UnixMilli()
	in := []*storagev1.AppendRecord{
		{TimestampMs: ts, Key: []byte("k0"), Value: []byte("v0"), Headers: []*storagev1.Header{{Key: "a", Value: []byte("1")}, {Key: "a", Value: []byte("2")}}},
		{TimestampMs: ts + 1, Value: []byte("null key")},
		{TimestampMs: ts + 2, Key: []byte("k2"), Value: []byte{}},
	}
	resp, err := st.Append(ctxT(t, 20*time.Second), &storagev1.AppendRequest{Channel: channel.KafkaPartition(topic, 1), Records: in})
	if err != nil {
		t.Fatalf("Append to %s: %v", channel.KafkaPartition(topic, 1), err)
	}
	if resp.LastSequence-resp.FirstSequence != int64(len(in)-1) {
		t.Fatalf("Append: sequences %d..%d for %d records", resp.FirstSequence, resp.LastSequence, len(in))
	}

	cl := newClient(t, s.KafkaAddrs, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {1: kgo.NewOffset().AtStart()}}))
	ctx := ctxT(t, 30*time.Second)
	var got []*kgo.Record
	for len(got) < len(in) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("kgo read %d of %d appended records before the deadline", len(got), len(in))
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("fetch partition %d: %v", p, err) })
		got = append(got, fs.Records()...)
	}
	if len(got) != len(in) {
		t.Fatalf("kgo read %d records, want %d", len(got), len(in))
	}
	for i, g := range got {
		w := in[i]
		if g.Partition != 1 || g.Offset != resp.FirstSequence-1+int64(i) {
			t.Fatalf("record %d at %d/%d, want 1/%d", i, g.Partition, g.Offset, resp.FirstSequence-1+int64(i))
		}
		if (g.Key == nil) != (w.Key == nil) || !bytes.Equal(g.Key, w.Key) || !bytes.Equal(g.Value, w.Value) {
			t.Fatalf("record %d: key/value %q/%q (key nil %v, value nil %v), want %q/%q (key nil %v)", i, g.Key, g.Value, g.Key == nil, g.Value == nil, w.Key, w.Value, w.Key == nil)
		}
		if g.Timestamp.UnixMilli() != w.TimestampMs {
			t.Fatalf("record %d: timestamp %d, want %d", i, g.Timestamp.UnixMilli(), w.TimestampMs)
		}
		if len(g.Headers) != len(w.Headers) {
			t.Fatalf("record %d: %d headers, want %d", i, len(g.Headers), len(w.Headers))
		}
		for j, h := range g.Headers {
			if h.Key != w.Headers[j].Key || !bytes.Equal(h.Value, w.Headers[j].Value) {
				t.Fatalf("record %d header %d: %q:%q, want %q:%q", i, j, h.Key, h.Value, w.Headers[j].Key, w.Headers[j].Value)
			}
		}
	}
	if ends := endOffsets(t, adm, topic); ends[0] != 0 || ends[1] != int64(len(in)) {
		t.Fatalf("end offsets %v, want partition 0: 0, partition 1: %d", ends, len(in))
	}
}
