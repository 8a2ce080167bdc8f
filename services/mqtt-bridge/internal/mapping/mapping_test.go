package mapping

import (
	"errors"
	"reflect"
	"testing"

	"go.uber.org/goleak"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/config"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/murmur2"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMatchFilter(t *testing.T) {
	for _, tc := range []struct {
		f, t string
		want bool
	}{
		{"#", "a/b", true},
		{"a/#", "a", true},
		{"a/#", "a/b/c", true},
		{"a/+", "a/b", true},
		{"a/+", "a/b/c", false},
		{"a/+/c", "a/b/c", true},
		{"+/+", "/x", true},
		{"a/b", "a/b", true},
		{"a/b", "a/bc", false},
		{"a", "a/b", false},
		{"#", "$SYS/x", false},
		{"+/x", "$SYS/x", false},
		{"$SYS/#", "$SYS/x", true},
		{"$share/g/a/+", "a/b", true},
	} {
		if got := MatchFilter(tc.f, tc.t); got != tc.want {
			t.Errorf("MatchFilter(%q, %q) = %v, want %v", tc.f, tc.t, got, tc.want)
		}
	}
}

func route(t *testing.T, c config.MQTTToKafka) *Route {
	t.Helper()
	if c.PartitionStrategy == "" {
		c.PartitionStrategy = config.KeyBased
	}
	if c.Key == "" {
		c.Key = config.KeyTopic
	}
	r, err := NewRoute(c)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestKeysAndPartitions(t *testing.T) {
	m := &Message{Topic: "spBv1.0/plant1/NDATA/edge4/dev2", ClientID: "edge4", Payload: []byte("p")}
	for _, tc := range []struct{ key, want string }{
		{config.KeyTopic, m.Topic},
		{config.KeyClientID, "edge4"},
		{"${MQTT_TOPIC_LEVEL_1}/${MQTT_TOPIC_LEVEL_3}", "plant1/edge4"},
	} {
		r := route(t, config.MQTTToKafka{KafkaTopic: "t", Key: tc.key})
		rec, err := r.Build(m, 12)
		if err != nil {
			t.Fatal(err)
		}
		if string(rec.Key) != tc.want {
			t.Errorf("key %q = %q, want %q", tc.key, rec.Key, tc.want)
		}
		if want := murmur2.Partition([]byte(tc.want), 12); rec.Partition != want {
			t.Errorf("partition %d, want murmur2 %d", rec.Partition, want)
		}
	}
	// Kafka's own vector: "21" → -973932308 → toPositive 1173551340 → % 7 = 3.
	r := route(t, config.MQTTToKafka{KafkaTopic: "t", Key: "${MQTT_TOPIC}"})
	if rec, _ := r.Build(&Message{Topic: "21"}, 7); rec.Partition != 3 {
		t.Errorf("partition of key 21 among 7 = %d, want 3", rec.Partition)
	}
	// none / uniform: round robin, null key.
	r = route(t, config.MQTTToKafka{KafkaTopic: "t", Key: config.KeyNone})
	seen := map[int32]int{}
	for i := 0; i < 9; i++ {
		rec, _ := r.Build(m, 3)
		if rec.Key != nil {
			t.Fatalf("key none gave %q", rec.Key)
		}
		seen[rec.Partition]++
	}
	if len(seen) != 3 || seen[0] != 3 {
		t.Errorf("round robin spread %v", seen)
	}
	r = route(t, config.MQTTToKafka{KafkaTopic: "t", PartitionStrategy: config.Uniform})
	a, _ := r.Build(m, 2)
	b, _ := r.Build(m, 2)
	if a.Partition == b.Partition {
		t.Errorf("uniform gave the same partition twice")
	}
}

func one(b byte) *byte     { return &b }
func u32(n uint32) *uint32 { return &n }
func hdrs(hs []*storagev1.Header) [][2]string {
	var out [][2]string
	for _, h := range hs {
		out = append(out, [2]string{h.Key, string(h.Value)})
	}
	return out
}

func full() *Message {
	return &Message{
		Topic: "a/b", Payload: []byte{0, 1, 2, 0xff}, QoS: 1, Retain: true, ClientID: "c1", Username: "u",
		ContentType: "application/json", CorrelationData: []byte{9, 8}, PayloadFormatIndicator: one(1),
		ResponseTopic: "reply/x", MessageExpiryInterval: u32(60),
		UserProperties: []UserProperty{{"k", "v1"}, {"mqtt-topic", "spoof"}, {"k", "v2"}},
	}
}

func TestHeaders(t *testing.T) {
	r := route(t, config.MQTTToKafka{KafkaTopic: "t", Headers: config.HeaderSpec{All: true}})
	rec, err := r.Build(full(), 1)
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]string{
		{"mqtt-topic", "a/b"}, {"mqtt-qos", "1"}, {"mqtt-retain", "true"}, {"mqtt-clientid", "c1"},
		{"mqtt-username", "u"}, {"mqtt-content-type", "application/json"}, {"mqtt-correlation-data", "\x09\x08"},
		{"mqtt-payload-format-indicator", "1"}, {"mqtt-response-topic", "reply/x"}, {"mqtt-message-expiry-interval", "60"},
		{"k", "v1"}, {"mqtt-user-property-mqtt-topic", "spoof"}, {"k", "v2"},
	}
	if got := hdrs(rec.Headers); !reflect.DeepEqual(got, want) {
		t.Errorf("headers all:\n got %q\nwant %q", got, want)
	}
	if string(rec.Value) != "\x00\x01\x02\xff" {
		t.Errorf("value changed: %q", rec.Value)
	}
	r = route(t, config.MQTTToKafka{KafkaTopic: "t", Headers: config.HeaderSpec{
		Names: []string{"mqtt-qos", "mqtt-user-properties"}, Fixed: []config.FixedHeader{{Name: "site", Value: "berlin"}},
	}})
	rec, _ = r.Build(full(), 1)
	want = [][2]string{{"mqtt-qos", "1"}, {"k", "v1"}, {"mqtt-user-property-mqtt-topic", "spoof"}, {"k", "v2"}, {"site", "berlin"}}
	if got := hdrs(rec.Headers); !reflect.DeepEqual(got, want) {
		t.Errorf("headers list:\n got %q\nwant %q", got, want)
	}
	r = route(t, config.MQTTToKafka{KafkaTopic: "t"})
	if rec, _ = r.Build(full(), 1); len(rec.Headers) != 0 {
		t.Errorf("default headers = %q, want none", hdrs(rec.Headers))
	}
}

func TestTooLarge(t *testing.T) {
	r := route(t, config.MQTTToKafka{KafkaTopic: "t", MaxRecordBytes: 10})
	if _, err := r.Build(&Message{Topic: "a", Payload: make([]byte, 10)}, 1); !errors.Is(err, ErrTooLarge) {
		t.Errorf("11 bytes (key a + 10): %v", err)
	}
	if _, err := r.Build(&Message{Topic: "a", Payload: make([]byte, 9)}, 1); err != nil {
		t.Errorf("10 bytes: %v", err)
	}
}

func sink(t *testing.T, c config.KafkaToMQTT) *Sink {
	t.Helper()
	if len(c.MQTTTopic) == 0 {
		c.MQTTTopic = config.StringList{"${KAFKA_TOPIC}"}
	}
	s, err := NewSink(c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRoundTripFromHeaders(t *testing.T) {
	r := route(t, config.MQTTToKafka{KafkaTopic: "t", Headers: config.HeaderSpec{All: true}})
	orig := full()
	rec, _ := r.Build(orig, 1)
	s := sink(t, config.KafkaToMQTT{KafkaTopics: []string{"t"}, FromHeaders: true})
	out, invalid := s.Build("t", &storagev1.Record{Key: rec.Key, Value: rec.Value, Headers: rec.Headers})
	if invalid != 0 || len(out) != 1 {
		t.Fatalf("out %v invalid %d", out, invalid)
	}
	want := *orig
	want.ClientID, want.Username = "", ""
	if !reflect.DeepEqual(out[0], want) {
		t.Errorf("round trip:\n got %+v\nwant %+v", out[0], want)
	}
}

func TestSinkTopicsAndInvalid(t *testing.T) {
	s := sink(t, config.KafkaToMQTT{KafkaTopicPattern: "cmd-.*", MQTTTopic: config.StringList{"x/${KAFKA_TOPIC}/${KAFKA_KEY}", "y/${KAFKA_KEY}"}})
	if !s.Reads("cmd-a") || s.Reads("other") || s.Reads("xcmd-a") {
		t.Errorf("pattern match wrong")
	}
	out, invalid := s.Build("cmd-a", &storagev1.Record{Key: []byte("k"), Value: []byte("v")})
	if invalid != 0 || len(out) != 2 || out[0].Topic != "x/cmd-a/k" || out[1].Topic != "y/k" || out[0].QoS != 1 {
		t.Errorf("out %+v invalid %d", out, invalid)
	}
	out, invalid = s.Build("cmd-a", &storagev1.Record{Key: []byte("a/#"), Value: []byte("v")})
	if invalid != 2 || len(out) != 0 {
		t.Errorf("wildcard key: out %+v invalid %d", out, invalid)
	}
	s = sink(t, config.KafkaToMQTT{KafkaTopics: []string{"t"}, MQTTTopic: config.StringList{"${KAFKA_KEY}"}})
	if out, invalid = s.Build("t", &storagev1.Record{Key: []byte("$SYS/broker"), Value: []byte("v")}); invalid != 1 || len(out) != 0 {
		t.Errorf("$ topic: out %+v invalid %d", out, invalid)
	}
	s = sink(t, config.KafkaToMQTT{KafkaTopics: []string{"t"}, FromHeaders: true})
	if out, invalid = s.Build("t", &storagev1.Record{Value: []byte("v"), Headers: []*storagev1.Header{{Key: "mqtt-topic", Value: []byte("$SYS/x")}}}); invalid != 1 {
		t.Errorf("$ topic from headers: out %+v invalid %d", out, invalid)
	}
}

// Headers that make properties MQTT cannot carry (Mosquitto ends the connection on
// them, so the bridge would retry the record for ever) make the record invalid.
func TestSinkInvalidProperties(t *testing.T) {
	s := sink(t, config.KafkaToMQTT{KafkaTopics: []string{"t"}, FromHeaders: true})
	for name, h := range map[string]*storagev1.Header{
		"binary header":         {Key: "trace", Value: []byte{0xff, 0xfe}},
		"NUL in a header value": {Key: "a", Value: []byte("x\x00y")},
		"NUL in a header name":  {Key: "a\x00", Value: []byte("x")},
		"bad content type":      {Key: "mqtt-content-type", Value: []byte("\xc3")},
		"wildcard response":     {Key: "mqtt-response-topic", Value: []byte("reply/#")},
		"NUL response":          {Key: "mqtt-response-topic", Value: []byte("reply\x00")},
		"huge correlation":      {Key: "mqtt-correlation-data", Value: make([]byte, 70000)},
	} {
		out, invalid := s.Build("t", &storagev1.Record{Value: []byte("v"), Headers: []*storagev1.Header{{Key: "mqtt-topic", Value: []byte("a/b")}, h}})
		if invalid != 1 || len(out) != 0 {
			t.Errorf("%s: out %+v invalid %d, want invalid", name, out, invalid)
		}
	}
	// Odd but valid values pass; unparsable qos/retain/expiry headers keep the defaults.
	out, invalid := s.Build("t", &storagev1.Record{Value: []byte("v"), Headers: []*storagev1.Header{
		{Key: "mqtt-topic", Value: []byte("a/b")}, {Key: "mqtt-qos", Value: []byte("7")}, {Key: "mqtt-retain", Value: []byte("maybe")},
		{Key: "mqtt-message-expiry-interval", Value: []byte("-1")}, {Key: "mqtt-payload-format-indicator", Value: []byte("300")},
		{Key: "ünïcode", Value: []byte("ok ✓")},
	}})
	if invalid != 0 || len(out) != 1 || out[0].QoS != 1 || out[0].Retain || out[0].MessageExpiryInterval != nil || out[0].PayloadFormatIndicator != nil ||
		len(out[0].UserProperties) != 1 {
		t.Errorf("out %+v invalid %d", out, invalid)
	}
}
