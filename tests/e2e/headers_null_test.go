package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

// Issue 15 item 2: a header value that is null stays null and one that is empty stays
// empty, in every protocol that can tell them apart (Kafka: length -1 and 0; the native
// API: value unset and set). MQTT user properties and Pub/Sub attributes are strings
// and cannot be null: a null header becomes an empty one there.

// nullEmptyHeaders are the headers each test sends: "null" without a value, "empty"
// with an empty one, "full" with "v".
var nullEmptyKgo = []kgo.RecordHeader{{Key: "null"}, {Key: "empty", Value: []byte{}}, {Key: "full", Value: []byte("v")}}

func nullEmptyNative() []*storagev1.Header {
	return []*storagev1.Header{{Key: "null"}, {Key: "empty", Value: []byte{}}, {Key: "full", Value: []byte("v")}}
}

// checkKgoNullEmpty checks a Kafka record's headers are nullEmptyKgo, null and empty apart.
func checkKgoNullEmpty(t *testing.T, what string, hs []kgo.RecordHeader) {
	t.Helper()
	if len(hs) != 3 || hs[0].Key != "null" || hs[1].Key != "empty" || hs[2].Key != "full" {
		t.Fatalf("%s: headers %v, want null, empty, full", what, hs)
	}
	if hs[0].Value != nil {
		t.Errorf("%s: header null has value %q, want null", what, hs[0].Value)
	}
	if hs[1].Value == nil || len(hs[1].Value) != 0 {
		t.Errorf("%s: header empty has value %q (null %v), want empty", what, hs[1].Value, hs[1].Value == nil)
	}
	if string(hs[2].Value) != "v" {
		t.Errorf("%s: header full has value %q, want v", what, hs[2].Value)
	}
}

// checkNativeNullEmpty checks a native record's headers are nullEmptyNative().
func checkNativeNullEmpty(t *testing.T, what string, hs []*storagev1.Header) {
	t.Helper()
	if len(hs) != 3 || hs[0].GetKey() != "null" || hs[1].GetKey() != "empty" || hs[2].GetKey() != "full" {
		t.Fatalf("%s: headers %v, want null, empty, full", what, hs)
	}
	if hs[0].Value != nil {
		t.Errorf("%s: header null has value %q, want null (unset)", what, hs[0].Value)
	}
	if hs[1].Value == nil || len(hs[1].Value) != 0 {
		t.Errorf("%s: header empty has value %q (unset %v), want set and empty", what, hs[1].Value, hs[1].Value == nil)
	}
	if string(hs[2].Value) != "v" {
		t.Errorf("%s: header full has value %q, want v", what, hs[2].Value)
	}
}

// TestHeadersNullEmptyKafka: a kgo record with a null and an empty header value keeps
// them apart when consumed with kgo and when read natively (Read), and a native Append
// of the same headers is consumed by kgo with them apart.
func TestHeadersNullEmptyKafka(t *testing.T) {
	s := sharedStack(t)
	topic := topicName("hdrnull")
	createTopic(t, newAdmin(t, s.KafkaAddrs), topic, 1, nil)
	cl := newClient(t, s.KafkaAddrs, kgo.DefaultProduceTopic(topic))
	if err := cl.ProduceSync(ctxT(t, 30*time.Second), &kgo.Record{Value: []byte("from kafka"), Headers: nullEmptyKgo}).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	st := storageClient(t, s.StorageAddr)
	ch := channel.KafkaPartition(topic, 0)
	if _, err := st.Append(ctxT(t, 30*time.Second), &storagev1.AppendRequest{Channel: ch, Records: []*storagev1.AppendRecord{{Value: []byte("native"), Headers: nullEmptyNative()}}}); err != nil {
		t.Fatalf("native append: %v", err)
	}
	recs := consumeAll(t, s.KafkaAddrs, topic)
	if len(recs) != 2 {
		t.Fatalf("consumed %d records, want 2", len(recs))
	}
	for _, r := range recs {
		checkKgoNullEmpty(t, "kgo consume of "+string(r.Value), r.Headers)
	}
	rr, err := st.Read(ctxT(t, 30*time.Second), &storagev1.ReadRequest{Channel: ch, FromSequence: 1})
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if len(rr.Records) != 2 {
		t.Fatalf("read %d records, want 2", len(rr.Records))
	}
	for _, r := range rr.Records {
		checkNativeNullEmpty(t, "native read of "+string(r.Value), r.Headers)
	}
}

// TestHeadersNullEmptyPubSub: a Pub/Sub attribute with an empty value is stored as an
// empty header (read natively), not a null one; headers appended natively reach a
// Pull as attributes, the null one as an empty string (attributes cannot be null).
func TestHeadersNullEmptyPubSub(t *testing.T) {
	s := pubsubStack(t)
	pub, sc := rawPubSub(t, s.PubSubAddrs[0])
	st, _ := storageClients(t, s.StorageAddr)
	id := psID("hdrnull")
	mustCreateTopic(t, pub, id)
	mustCreateSub(t, sc, id, id, nil)
	ctx := ctxT(t, 60*time.Second)
	if _, err := pub.Publish(ctx, &pubsubpb.PublishRequest{Topic: topicPath(id), Messages: []*pubsubpb.PubsubMessage{{Data: []byte("ps"), Attributes: map[string]string{"empty": "", "full": "v"}}}}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	rr, err := st.Read(ctx, &storagev1.ReadRequest{Channel: "gcp." + id, FromSequence: 1})
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if len(rr.Records) != 1 {
		t.Fatalf("read %d records, want 1", len(rr.Records))
	}
	found := false
	for _, h := range rr.Records[0].Headers {
		if h.GetKey() == "empty" {
			found = true
			if h.Value == nil {
				t.Errorf("attribute empty=\"\" stored as a null header, want an empty one")
			}
		}
	}
	if !found {
		t.Fatalf("no header for attribute empty in %v", rr.Records[0].Headers)
	}
	if _, err := st.Append(ctx, &storagev1.AppendRequest{Channel: "gcp." + id, Records: []*storagev1.AppendRecord{{Value: []byte("native"), Headers: nullEmptyNative()}}}); err != nil {
		t.Fatalf("native append: %v", err)
	}
	got := map[string]map[string]string{}
	waitFor(t, 30*time.Second, "both messages pulled", func() bool {
		resp, err := sc.Pull(ctx, &pubsubpb.PullRequest{Subscription: subPath(id), MaxMessages: 10})
		if err != nil {
			t.Fatalf("pull: %v", err)
		}
		for _, m := range resp.ReceivedMessages {
			got[string(m.GetMessage().GetData())] = m.GetMessage().GetAttributes()
		}
		return len(got) == 2
	})
	want := map[string]map[string]string{
		"ps":     {"empty": "", "full": "v"},
		"native": {"null": "", "empty": "", "full": "v"},
	}
	for data, attrs := range want {
		if fmt.Sprint(got[data]) != fmt.Sprint(attrs) {
			t.Errorf("message %q: attributes %v, want %v", data, got[data], attrs)
		}
	}
}

// TestHeadersNullEmptyMQTT: an MQTT 5 user property with an empty value (mosquitto_pub
// -D publish user-property empty "") becomes a Kafka header with an empty value, not
// a null one; a Kafka record's null and empty headers both reach MQTT (from-headers) as
// user properties with an empty value, MQTT having no null.
func TestHeadersNullEmptyMQTT(t *testing.T) {
	testenv.RequireMQTT(t)
	s := sharedStack(t)
	id := mqttID()
	in, back := "mqtt-hn-"+id, "mqtt-hb-"+id
	adm := newAdmin(t, s.KafkaAddrs)
	createTopic(t, adm, in, 1, nil)
	createTopic(t, adm, back, 1, nil)
	startBridge(t, s, "mqtt-bridge-hn-"+id, fmt.Sprintf(`
id: hn-%[1]s
clusters:
  - name: mosquitto
    urls: [mqtt://%[2]s]
    client-id: tributary-e2e-hn-%[1]s
    session-expiry: 1m
mqtt-to-kafka:
  - id: in-%[1]s
    mqtt-topic-filters: ["e2e/%[1]s/in"]
    qos: 1
    kafka-topic: %[3]s
    headers: all
kafka-to-mqtt:
  - id: back-%[1]s
    kafka-topics: [%[4]s]
    from-headers: true
    start-at: earliest
`, id, testenv.MQTTAddr(), in, back))

	sub := startMosqSub(t, testenv.MQTTAddr(), "-t", "e2e/"+id+"/back", "-q", "1")
	mosqPub(t, testenv.MQTTAddr(), "-q", "1", "-t", "e2e/"+id+"/in", "-m", "m",
		"-D", "publish", "user-property", "empty", "",
		"-D", "publish", "user-property", "full", "v")
	var recs []*kgo.Record
	waitFor(t, 60*time.Second, "the MQTT message in Kafka", func() bool {
		recs = consumeAll(t, s.KafkaAddrs, in)
		return len(recs) == 1
	})
	var empty, full *kgo.RecordHeader
	for i, h := range recs[0].Headers {
		switch h.Key {
		case "empty":
			empty = &recs[0].Headers[i]
		case "full":
			full = &recs[0].Headers[i]
		}
	}
	if empty == nil || full == nil {
		t.Fatalf("headers %v lack the user properties empty and full", recs[0].Headers)
	}
	if empty.Value == nil {
		t.Errorf("user property empty=\"\" became a null Kafka header, want an empty one")
	}
	if string(full.Value) != "v" {
		t.Errorf("user property full=v became %q", full.Value)
	}

	cl := newClient(t, s.KafkaAddrs, kgo.DefaultProduceTopic(back))
	hs := append([]kgo.RecordHeader{{Key: "mqtt-topic", Value: []byte("e2e/" + id + "/back")}}, nullEmptyKgo...)
	if err := cl.ProduceSync(ctxT(t, 30*time.Second), &kgo.Record{Value: []byte("k"), Headers: hs}).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	line := sub.next(t, 1, 60*time.Second)[0]
	if !strings.Contains(line, "|up=null: empty: full:v|") {
		t.Errorf("MQTT message %q: want user properties null and empty with empty values, full:v", line)
	}
}
