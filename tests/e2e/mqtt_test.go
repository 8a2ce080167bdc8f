package e2e

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

// javaPartition is the partition the Java client's default partitioner picks for key
// among n partitions: franz-go's StickyKeyPartitioner hashes keys as it does
// ((murmur2(key) & 0x7fffffff) % n).
func javaPartition(key []byte, n int) int32 {
	return int32(kgo.StickyKeyPartitioner(nil).ForTopic("").Partition(&kgo.Record{Key: key}, n))
}

// mqttID is a fresh id for topic names, client ids and mapping ids of one test.
func mqttID() string { return strings.TrimPrefix(topicName("m"), "m-") }

func startBridge(t *testing.T, s *stack.Stack, name, cfg string) *stack.Proc {
	t.Helper()
	p, err := s.StartMQTTBridge(context.Background(), name, cfg)
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() { _ = p.Stop(20 * time.Second) })
	return p
}

func headerList(r *kgo.Record) [][2]string {
	var out [][2]string
	for _, h := range r.Headers {
		out = append(out, [2]string{h.Key, string(h.Value)})
	}
	return out
}

// qos alternates the round trip's messages between QoS 1 and 2.
// committedAt is group's committed offset of topic's partition 0, -1 when there is none
// (or it cannot be read yet).
func committedAt(t *testing.T, adm *kadm.Client, group, topic string) int64 {
	os, err := adm.FetchOffsets(ctxT(t, 10*time.Second), group)
	if err != nil {
		return -1
	}
	o, ok := os.Lookup(topic, 0)
	if !ok || o.Err != nil {
		return -1
	}
	return o.At
}

func qos(i int) string { return fmt.Sprint(1 + i%2) }

// TestMQTTUpstreamRoundTrip: mosquitto_pub (MQTT 5, QoS 1 and 2, retained, every property,
// repeated user properties) → Mosquitto → bridge → Kafka topic (read with kgo: value,
// key from a template, murmur2 partition, headers in order) → bridge (from-headers) →
// Mosquitto → mosquitto_sub, which sees the identical message twice: the original and
// the republished one. The republished one does not come back into Kafka (No Local),
// and the mapping's overlapping filters do not store a message twice (subscription
// identifiers).
func TestMQTTUpstreamRoundTrip(t *testing.T) {
	testenv.RequireMQTT(t)
	s := sharedStack(t)
	id := mqttID()
	topic := "mqtt-rt-" + id
	createTopic(t, newAdmin(t, s.KafkaAddrs), topic, 4, nil)
	bridge := startBridge(t, s, "mqtt-bridge-rt-"+id, fmt.Sprintf(`
id: rt-%[1]s
clusters:
  - name: mosquitto
    urls: [mqtt://%[2]s]
    client-id: tributary-e2e-rt-%[1]s
    session-expiry: 1m
mqtt-to-kafka:
  - id: in-%[1]s
    mqtt-topic-filters: ["e2e/%[1]s/+/data", "e2e/%[1]s/#"] # overlapping: one record each all the same
    qos: 2
    kafka-topic: %[3]s
    key: "dev-${MQTT_TOPIC_LEVEL_2}"
    headers: all
kafka-to-mqtt:
  - id: back-%[1]s
    kafka-topics: [%[3]s]
    from-headers: true
    start-at: earliest
`, id, testenv.MQTTAddr(), topic))

	sub := startMosqSub(t, testenv.MQTTAddr(), "-t", "e2e/"+id+"/#", "-q", "2", "--retain-as-published")
	devices := []string{"a1", "b2", "c3", "d4", "e5"}
	for i, d := range devices {
		mosqPub(t, testenv.MQTTAddr(), "-q", qos(i), "-r", "-t", "e2e/"+id+"/"+d+"/data", "-m", fmt.Sprintf("reading %d from %s", i, d),
			"-D", "publish", "content-type", "text/plain",
			"-D", "publish", "correlation-data", "corr-"+d,
			"-D", "publish", "response-topic", "e2e/"+id+"/reply",
			"-D", "publish", "payload-format-indicator", "1",
			"-D", "publish", "message-expiry-interval", "3600",
			"-D", "publish", "user-property", "site", "berlin",
			"-D", "publish", "user-property", "mqtt-topic", "spoofed",
			"-D", "publish", "user-property", "site", "hamburg")
	}
	t.Cleanup(func() {
		for _, d := range devices { // clear the retained messages
			mosqPub(t, testenv.MQTTAddr(), "-r", "-n", "-t", "e2e/"+id+"/"+d+"/data")
		}
	})

	lines := sub.next(t, 2*len(devices), 60*time.Second)
	counts := map[string]int{}
	for _, l := range lines {
		counts[l]++
	}
	for i, d := range devices {
		want := fmt.Sprintf("e2e/%s/%s/data|q=%s|r=1|ct=text/plain|cd=corr-%s|exp=3600|pf=1|rt=e2e/%s/reply|up=site:berlin mqtt-topic:spoofed site:hamburg|%s",
			id, d, qos(i), d, id, hex.EncodeToString([]byte(fmt.Sprintf("reading %d from %s", i, d))))
		if counts[want] != 2 {
			t.Errorf("message %d: seen %d times, want 2 (original and republished); want line\n  %s\ngot lines:\n  %s", i, counts[want], want, strings.Join(lines, "\n  "))
		}
	}

	recs := consumeAll(t, s.KafkaAddrs, topic)
	if len(recs) != len(devices) {
		t.Fatalf("Kafka topic has %d records, want %d (one per MQTT message; the republished copies must not loop back)", len(recs), len(devices))
	}
	byValue := map[string]*kgo.Record{}
	for _, r := range recs {
		byValue[string(r.Value)] = r
	}
	for i, d := range devices {
		r := byValue[fmt.Sprintf("reading %d from %s", i, d)]
		if r == nil {
			t.Errorf("message %d missing from Kafka", i)
			continue
		}
		if string(r.Key) != "dev-"+d {
			t.Errorf("key %q, want %q", r.Key, "dev-"+d)
		}
		if want := javaPartition([]byte("dev-"+d), 4); r.Partition != want {
			t.Errorf("key %q in partition %d, want %d (murmur2)", r.Key, r.Partition, want)
		}
		want := [][2]string{
			{"mqtt-topic", "e2e/" + id + "/" + d + "/data"}, {"mqtt-qos", qos(i)}, {"mqtt-retain", "true"},
			{"mqtt-content-type", "text/plain"}, {"mqtt-correlation-data", "corr-" + d},
			{"mqtt-payload-format-indicator", "1"}, {"mqtt-response-topic", "e2e/" + id + "/reply"},
			{"mqtt-message-expiry-interval", "3600"},
			{"site", "berlin"}, {"mqtt-user-property-mqtt-topic", "spoofed"}, {"site", "hamburg"},
		}
		if got := headerList(r); !reflect.DeepEqual(got, want) {
			t.Errorf("headers of message %d:\n got %q\nwant %q", i, got, want)
		}
	}
	if got := bridgeMetric(t, bridge, "tributary_mqtt_stored_total", "in-"+id); got != float64(len(devices)) {
		t.Errorf("stored_total = %v, want %d", got, len(devices))
	}
	waitFor(t, 10*time.Second, "published_total", func() bool {
		return bridgeMetric(t, bridge, "tributary_mqtt_published_total", "back-"+id) == float64(len(devices))
	})
}

// TestMQTTKafkaToMosquittoResume: records produced with kgo reach mosquitto_sub through
// a kafka-to-mqtt mapping (topic template with ${KAFKA_TOPIC} and ${KAFKA_KEY}); a
// record whose key makes a $ or wildcard topic is skipped and counted invalid; after
// kill -9 of the bridge, records produced meanwhile arrive and nothing before the
// committed offset is published again.
func TestMQTTKafkaToMosquittoResume(t *testing.T) {
	testenv.RequireMQTT(t)
	s := sharedStack(t)
	id := mqttID()
	topic := "mqtt-k2m-" + id
	adm := newAdmin(t, s.KafkaAddrs)
	createTopic(t, adm, topic, 1, nil)
	mapping := "cmd-" + id
	raw := "raw-" + id
	bridge := startBridge(t, s, "mqtt-bridge-k2m-"+id, fmt.Sprintf(`
id: k2m-%[1]s
clusters:
  - name: mosquitto
    urls: [mqtt://%[2]s]
    client-id: tributary-e2e-k2m-%[1]s
kafka-to-mqtt:
  - id: %[4]s
    kafka-topics: [%[3]s]
    mqtt-topic: "e2e/%[1]s/${KAFKA_TOPIC}/${KAFKA_KEY}"
    qos: 1
    properties:
      content-type: application/octet-stream
      user-properties:
        - {name: via, value: tributary}
  - id: %[5]s
    kafka-topics: [%[3]s]
    mqtt-topic: "${KAFKA_KEY}"
`, id, testenv.MQTTAddr(), topic, mapping, raw))
	group, rawGroup := "tributary-"+mapping+"-group", "tributary-"+raw+"-group"
	committedIn := func(group string) int64 { return committedAt(t, adm, group, topic) }
	committed := func() int64 { return committedIn(group) }
	// A new group starts at the end and commits that position at once.
	waitFor(t, 20*time.Second, "the new group's starting offset", func() bool { return committed() == 0 })

	sub := startMosqSub(t, testenv.MQTTAddr(), "-t", "e2e/"+id+"/#", "-q", "1")
	cl := newClient(t, s.KafkaAddrs, kgo.DefaultProduceTopic(topic))
	produce := func(keys ...string) {
		for _, k := range keys {
			if err := cl.ProduceSync(ctxT(t, 20*time.Second), &kgo.Record{Key: []byte(k), Value: []byte("v-" + k)}).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
		}
	}
	produce("e2e/"+id+"/k1", "$SYS/x", "a/+/b", "e2e/"+id+"/k2")
	line := func(k string) string {
		return fmt.Sprintf("e2e/%s/%s/%s|q=1|r=0|ct=application/octet-stream|cd=|exp=|pf=|rt=|up=via:tributary|%s", id, topic, k, hex.EncodeToString([]byte("v-"+k)))
	}
	rawLine := func(k string) string {
		return fmt.Sprintf("%s|q=1|r=0|ct=|cd=|exp=|pf=|rt=|up=|%s", k, hex.EncodeToString([]byte("v-"+k)))
	}
	got := sub.next(t, 5, 30*time.Second)
	want := []string{
		line("e2e/" + id + "/k1"), line("$SYS/x"), line("e2e/" + id + "/k2"),
		rawLine("e2e/" + id + "/k1"), rawLine("e2e/" + id + "/k2"),
	}
	// The two mappings publish independently: compare as sets, each mapping in order.
	if d := multisetDiff(got, want); d != "" {
		t.Fatalf("mosquitto_sub lines differ: %s", d)
	}
	// a/+/b makes a wildcard topic for both mappings, $SYS/x a $ topic for the raw one.
	waitFor(t, 10*time.Second, "invalid_total", func() bool {
		return bridgeMetric(t, bridge, "tributary_mqtt_invalid_total", raw) == 2 &&
			bridgeMetric(t, bridge, "tributary_mqtt_invalid_total", mapping) == 1
	})
	// Both groups: a mapping killed before its commit publishes its records again.
	waitFor(t, 20*time.Second, "offset 4 committed", func() bool { return committed() == 4 && committedIn(rawGroup) == 4 })

	if err := s.Kill(bridge.Name, 9); err != nil {
		t.Fatal(err)
	}
	produce("e2e/"+id+"/k3", "e2e/"+id+"/k4")
	if err := s.Restart(context.Background(), bridge.Name); err != nil {
		t.Fatal(err)
	}
	got = sub.next(t, 4, 30*time.Second)
	want = []string{line("e2e/" + id + "/k3"), line("e2e/" + id + "/k4"), rawLine("e2e/" + id + "/k3"), rawLine("e2e/" + id + "/k4")}
	if d := multisetDiff(got, want); d != "" {
		t.Fatalf("after restart, mosquitto_sub lines differ (resume from the committed offset): %s", d)
	}
	waitFor(t, 20*time.Second, "offset 6 committed", func() bool { return committed() == 6 })
}

// TestMQTTKafkaToMQTTCommittedPastEnd: a group whose committed offset lies past the
// end of the log when the bridge starts (the log was re-created empty under an old
// committed offset, as after `rm -rf run` with the database kept) reads the log from its
// start, commits that, and later records are published (it used to retry for ever).
func TestMQTTKafkaToMQTTCommittedPastEnd(t *testing.T) {
	testenv.RequireMQTT(t)
	s := sharedStack(t)
	id := mqttID()
	topic := "mqtt-k2m-past-" + id
	adm := newAdmin(t, s.KafkaAddrs)
	createTopic(t, adm, topic, 1, nil)
	mapping := "past-" + id
	group := "tributary-" + mapping + "-group"
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: topic, Partition: 0, At: 50, LeaderEpoch: -1})
	if r, err := adm.CommitOffsets(ctxT(t, 10*time.Second), group, offs); err != nil || r.Error() != nil {
		t.Fatalf("commit offset 50: %v %v", err, r.Error())
	}
	committed := func() int64 { return committedAt(t, adm, group, topic) }
	startBridge(t, s, "mqtt-bridge-past-"+id, fmt.Sprintf(`
id: past-%[1]s
clusters:
  - name: mosquitto
    urls: [mqtt://%[2]s]
    client-id: tributary-e2e-past-%[1]s
kafka-to-mqtt:
  - id: %[4]s
    kafka-topics: [%[3]s]
    mqtt-topic: "e2e/%[1]s/${KAFKA_KEY}"
`, id, testenv.MQTTAddr(), topic, mapping))
	waitFor(t, 30*time.Second, "the log start (offset 0) committed", func() bool { return committed() == 0 })
	sub := startMosqSub(t, testenv.MQTTAddr(), "-t", "e2e/"+id+"/#", "-q", "1")
	cl := newClient(t, s.KafkaAddrs, kgo.DefaultProduceTopic(topic))
	if err := cl.ProduceSync(ctxT(t, 20*time.Second), &kgo.Record{Key: []byte("k1"), Value: []byte("after-reset")}).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	got := sub.next(t, 1, 30*time.Second)
	want := fmt.Sprintf("e2e/%s/k1|q=1|r=0|ct=|cd=|exp=|pf=|rt=|up=|%s", id, hex.EncodeToString([]byte("after-reset")))
	if len(got) != 1 || got[0] != want {
		t.Fatalf("mosquitto_sub got %q, want %q", got, want)
	}
	waitFor(t, 20*time.Second, "offset 1 committed", func() bool { return committed() == 1 })
}

// TestMQTTBridgeCheck runs `mqtt-bridge check`: every problem is printed with its file
// and line (a misspelt key with the nearest real key, a bad template, an unknown
// cluster, a loop as a warning) and the exit status says whether the file would load.
func TestMQTTBridgeCheck(t *testing.T) {
	bin, err := stack.Binaries(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(`id: check
clusters:
  - name: site
    urls: [mqtt://127.0.0.1:1883]
mqtt-to-kafka:
  - id: in
    source: sight
    mqtt-topic-filters: ["a/#"]
    kafka-topik: events
  - id: in2
    source: site
    mqtt-topic-filters: ["b/#"]
    kafka-topic: events
    key: "${MQTT_TOPIC_LEVEL}"
kafka-to-mqtt:
  - id: out
    kafka-topics: [events]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(bin, stack.MQTTBridge), "check", "-C", bad).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("check of a bad file: %v, want exit status 1\n%s", err, out)
	}
	for _, want := range []string{
		bad + `:7: mqtt-to-kafka[0].source: unknown cluster "sight"; did you mean "site"?`,
		bad + `:9: mqtt-to-kafka[0].kafka-topik: unknown key "kafka-topik"; did you mean "kafka-topic"?`,
		bad + `:14: mqtt-to-kafka[1].key: bad template "${MQTT_TOPIC_LEVEL}"`,
		bad + `:16: warning: kafka-to-mqtt[0]: loop: "out" reads Kafka topic "events", which mqtt-to-kafka "in2" writes`,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("listener: {addr: 127.0.0.1:0}\nmqtt-to-kafka:\n  - {id: a, mqtt-topic-filters: [\"#\"], kafka-topic: t}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(bin, stack.MQTTBridge), "check", "-C", good).CombinedOutput(); err != nil {
		t.Errorf("check of a good file: %v\n%s", err, out)
	}
}
