package e2e

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

// TestHostileHeadersKafkaToNative: Kafka records with many headers, duplicate keys,
// null, empty and 512 KiB values, and header keys that are not UTF-8 (Kafka does not
// check them) are read back the same through Kafka, and through the native Read and
// Subscribe, where a key that is not UTF-8 has U+FFFD in place of its bad bytes (a
// proto string must be UTF-8) and the records around it are served too.
func TestHostileHeadersKafkaToNative(t *testing.T) {
	s := sharedStack(t)
	topic := topicName("hhdr")
	createTopic(t, newAdmin(t, s.KafkaAddrs), topic, 1, nil)
	cl := newClient(t, s.KafkaAddrs, kgo.DefaultProduceTopic(topic), kgo.ProducerBatchMaxBytes(4<<20))
	huge := bytes.Repeat([]byte("h"), 512<<10)
	var many []kgo.RecordHeader
	for i := 0; i < 1000; i++ {
		many = append(many, kgo.RecordHeader{Key: "dup"}, kgo.RecordHeader{Key: "dup", Value: []byte{}})
	}
	recs := []*kgo.Record{
		{Value: []byte("before")},
		{Value: []byte("badkey"), Headers: []kgo.RecordHeader{{Key: "ok", Value: []byte("1")}, {Key: "bad\xff\xfekey", Value: []byte("2")}, {Key: "\xc3"}}},
		{Value: []byte("many"), Headers: many},
		{Value: []byte("huge"), Headers: []kgo.RecordHeader{{Key: "huge", Value: huge}, {Key: "", Value: nil}, {Key: "", Value: []byte{}}}},
		{Value: []byte("after")},
	}
	for _, r := range recs {
		if err := cl.ProduceSync(ctxT(t, 30*time.Second), r).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", r.Value, err)
		}
	}
	got := consumeAll(t, s.KafkaAddrs, topic)
	if len(got) != len(recs) {
		t.Fatalf("Kafka read %d records, want %d", len(got), len(recs))
	}
	for i, r := range got {
		if len(r.Headers) != len(recs[i].Headers) {
			t.Fatalf("Kafka record %s: %d headers, want %d", r.Value, len(r.Headers), len(recs[i].Headers))
		}
		for j, h := range r.Headers {
			w := recs[i].Headers[j]
			if h.Key != w.Key || !bytes.Equal(h.Value, w.Value) || (h.Value == nil) != (w.Value == nil) {
				t.Fatalf("Kafka record %s header %d: %q=%.20q (null %v), want %q=%.20q (null %v)", r.Value, j, h.Key, h.Value, h.Value == nil, w.Key, w.Value, w.Value == nil)
			}
		}
	}

	checkNative := func(what string, got []*storagev1.Record) {
		t.Helper()
		if len(got) != len(recs) {
			t.Fatalf("%s: %d records, want %d", what, len(got), len(recs))
		}
		for i, r := range got {
			if string(r.Value) != string(recs[i].Value) || len(r.Headers) != len(recs[i].Headers) {
				t.Fatalf("%s record %d: %q with %d headers, want %q with %d", what, i, r.Value, len(r.Headers), recs[i].Value, len(recs[i].Headers))
			}
			for j, h := range r.Headers {
				w := recs[i].Headers[j]
				if wk := strings.ToValidUTF8(w.Key, "\uFFFD"); h.GetKey() != wk || !bytes.Equal(h.Value, w.Value) || (h.Value == nil) != (w.Value == nil) {
					t.Fatalf("%s record %s header %d: %q=%.20q (null %v), want %q=%.20q (null %v)", what, r.Value, j, h.GetKey(), h.Value, h.Value == nil, wk, w.Value, w.Value == nil)
				}
			}
		}
	}
	st := storageClient(t, s.StorageAddr)
	ch := channel.KafkaPartition(topic, 0)
	var native []*storagev1.Record
	for seq := int64(1); len(native) < len(recs); {
		resp, err := st.Read(ctxT(t, 20*time.Second), &storagev1.ReadRequest{Channel: ch, FromSequence: seq, MaxBytes: 8 << 20})
		if err != nil {
			t.Fatalf("native Read at %d: %v", seq, err)
		}
		if len(resp.Records) == 0 {
			t.Fatalf("native Read at %d: nothing, high watermark %d", seq, resp.HighWatermark)
		}
		native = append(native, resp.Records...)
		seq = resp.NextSequence
	}
	checkNative("native Read", native)

	ctx := ctxT(t, 30*time.Second)
	sub, err := st.Subscribe(ctx, &storagev1.SubscribeRequest{Channel: ch, Start: &storagev1.SubscribeRequest_First{First: true}})
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	var subbed []*storagev1.Record
	for len(subbed) < len(recs) {
		m, err := sub.Recv()
		if err != nil {
			t.Fatalf("Subscribe after %d records: %v", len(subbed), err)
		}
		subbed = append(subbed, m.Records...)
	}
	checkNative("native Subscribe", subbed[:len(recs)])
}

// headerBatch encodes one uncompressed RecordBatch v2 (producer id -1) whose records
// have the values and headers given, headers with nil values null.
func headerBatch(values []string, headers [][]kmsg.Header) []byte {
	ts := time.Now().UnixMilli()
	var recs []byte
	for i, v := range values {
		r := kmsg.Record{OffsetDelta: int32(i), Value: []byte(v), Headers: headers[i]}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	b := kmsg.RecordBatch{PartitionLeaderEpoch: -1, Magic: 2, LastOffsetDelta: int32(len(values) - 1),
		FirstTimestamp: ts, MaxTimestamp: ts, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
		NumRecords: int32(len(values)), Records: recs}
	return resealBatch(b.AppendTo(nil))
}

// TestHostileHeadersPubSub: Kafka-format records appended to gcp.<topic> with header
// keys and values that are not UTF-8, 2,000 headers with one repeated key, null,
// empty and 512 KiB values reach a Pub/Sub Pull subscriber, with the records around
// them, and nothing stays undelivered.
func TestHostileHeadersPubSub(t *testing.T) {
	s := pubsubStack(t)
	pub, sc := rawPubSub(t, s.PubSubAddrs[0])
	st, _ := storageClients(t, s.StorageAddr)
	id := psID("hhdr")
	mustCreateTopic(t, pub, id)
	mustCreateSub(t, sc, id, id, nil)
	ctx := ctxT(t, 90*time.Second)
	var many []kmsg.Header
	for i := 0; i < 1000; i++ {
		many = append(many, kmsg.Header{Key: "dup"}, kmsg.Header{Key: "dup", Value: []byte{}})
	}
	values := []string{"before", "bad", "many", "huge", "after"}
	headers := [][]kmsg.Header{
		nil,
		{{Key: "k\xff", Value: []byte("v\xfe")}, {Key: "\xc3"}, {Key: "ok", Value: []byte{}}},
		many,
		{{Key: "huge", Value: bytes.Repeat([]byte("h"), 512<<10)}, {Key: "n"}},
		nil,
	}
	for i := range values {
		resp, err := st.AppendBatches(ctx, &storagev1.AppendBatchesRequest{Channels: []*storagev1.ChannelBatches{{
			Channel: channel.PubSubTopic(id), Batches: headerBatch(values[i:i+1], headers[i:i+1])}}})
		if err != nil || resp.Results[0].Error != 0 {
			t.Fatalf("AppendBatches %s: %v %v", values[i], err, resp)
		}
	}
	got := map[string]map[string]string{}
	waitFor(t, 60*time.Second, "every message pulled", func() bool {
		resp, err := sc.Pull(ctx, &pubsubpb.PullRequest{Subscription: subPath(id), MaxMessages: 10})
		if err != nil {
			t.Fatalf("Pull after %d messages: %v", len(got), err)
		}
		var ack []string
		for _, m := range resp.ReceivedMessages {
			got[string(m.GetMessage().GetData())] = m.GetMessage().GetAttributes()
			ack = append(ack, m.AckId)
		}
		if len(ack) > 0 {
			if _, err := sc.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: subPath(id), AckIds: ack}); err != nil {
				t.Fatalf("Acknowledge: %v", err)
			}
		}
		return len(got) == len(values)
	})
	if a := got["many"]; len(a) != 1 {
		t.Errorf("many: attributes %v, want the one key dup", a)
	}
	if a := got["huge"]; len(a["huge"]) != 512<<10 || a["n"] != "" {
		t.Errorf("huge: attribute huge of %d bytes, n %q", len(a["huge"]), a["n"])
	}
	if a := got["bad"]; a["k\uFFFD"] != "v\uFFFD" || a["ok"] != "" {
		t.Errorf("bad: attributes %q, want k\uFFFD=v\uFFFD, \uFFFD, ok", a)
	}
}

// TestHostileHeadersMQTT: Kafka records with a header key that is not UTF-8, 200
// headers under one key and null values reach MQTT through the bridge's kafka-to-mqtt
// (from-headers) in order, with the records around them; one whose header value is not
// UTF-8 (no MQTT string can carry it) is left out, and the next one still comes.
func TestHostileHeadersMQTT(t *testing.T) {
	testenv.RequireMQTT(t)
	s := sharedStack(t)
	id := mqttID()
	back := "mqtt-hh-" + id
	createTopic(t, newAdmin(t, s.KafkaAddrs), back, 1, nil)
	startBridge(t, s, "mqtt-bridge-hh-"+id, fmt.Sprintf(`
id: hh-%[1]s
clusters:
  - name: mosquitto
    urls: [mqtt://%[2]s]
    client-id: tributary-e2e-hh-%[1]s
    session-expiry: 1m
kafka-to-mqtt:
  - id: back-%[1]s
    kafka-topics: [%[3]s]
    from-headers: true
    start-at: earliest
`, id, testenv.MQTTAddr(), back))
	sub := startMosqSub(t, testenv.MQTTAddr(), "-t", "e2e/"+id+"/back", "-q", "1")
	topicHdr := kgo.RecordHeader{Key: "mqtt-topic", Value: []byte("e2e/" + id + "/back")}
	var many []kgo.RecordHeader
	for i := 0; i < 100; i++ {
		many = append(many, kgo.RecordHeader{Key: "dup"}, kgo.RecordHeader{Key: "dup", Value: []byte{}})
	}
	cl := newClient(t, s.KafkaAddrs, kgo.DefaultProduceTopic(back))
	for _, r := range []*kgo.Record{
		{Value: []byte("before")},
		{Value: []byte("badkey"), Headers: []kgo.RecordHeader{{Key: "k\xff", Value: []byte("v")}, {Key: "\xc3"}}},
		{Value: []byte("badval"), Headers: []kgo.RecordHeader{{Key: "k", Value: []byte("v\xfe")}}},
		{Value: []byte("many"), Headers: many},
		{Value: []byte("after")},
	} {
		r.Headers = append([]kgo.RecordHeader{topicHdr}, r.Headers...)
		if err := cl.ProduceSync(ctxT(t, 30*time.Second), r).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", r.Value, err)
		}
	}
	lines := sub.next(t, 4, 60*time.Second)
	for i, v := range []string{"before", "badkey", "many", "after"} {
		if !strings.HasSuffix(lines[i], "|"+hex.EncodeToString([]byte(v))) {
			t.Errorf("MQTT message %d: %q, want payload %s", i, lines[i], v)
		}
	}
	if !strings.Contains(lines[1], "|up=k\uFFFD:v \uFFFD:|") {
		t.Errorf("badkey: %q, want user properties k\uFFFD:v and \uFFFD: (empty)", lines[1])
	}
	if n := strings.Count(lines[2], "dup:"); n != 200 {
		t.Errorf("many: %d user properties dup, want 200", n)
	}
}
