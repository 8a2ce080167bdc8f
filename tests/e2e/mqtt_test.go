package e2e

import (
	"context"
	"encoding/hex"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/libs/murmur2"
	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

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

// TestMQTTUpstreamRoundTrip: mosquitto_pub (MQTT 5, QoS 1, retained, every property,
// repeated user properties) → Mosquitto → bridge → Kafka topic (read with kgo: value,
// key from a template, murmur2 partition, headers in order) → bridge (from-headers) →
// Mosquitto → mosquitto_sub, which sees the identical message twice: the original and
// the republished one. The republished one does not come back into Kafka (No Local).
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
    mqtt-topic-filters: ["e2e/%[1]s/+/data"]
    kafka-topic: %[3]s
    key: "dev-${MQTT_TOPIC_LEVEL_2}"
    headers: all
kafka-to-mqtt:
  - id: back-%[1]s
    kafka-topics: [%[3]s]
    from-headers: true
    start-at: earliest
`, id, testenv.MQTTAddr(), topic))

	sub := startMosqSub(t, testenv.MQTTAddr(), "-t", "e2e/"+id+"/#", "-q", "1", "--retain-as-published")
	devices := []string{"a1", "b2", "c3", "d4", "e5"}
	for i, d := range devices {
		mosqPub(t, testenv.MQTTAddr(), "-q", "1", "-r", "-t", "e2e/"+id+"/"+d+"/data", "-m", fmt.Sprintf("reading %d from %s", i, d),
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
		want := fmt.Sprintf("e2e/%s/%s/data|q=1|r=1|ct=text/plain|cd=corr-%s|exp=3600|pf=1|rt=e2e/%s/reply|up=site:berlin mqtt-topic:spoofed site:hamburg|%s",
			id, d, d, id, hex.EncodeToString([]byte(fmt.Sprintf("reading %d from %s", i, d))))
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
		if want := murmur2.Partition([]byte("dev-"+d), 4); r.Partition != want {
			t.Errorf("key %q in partition %d, want %d (murmur2)", r.Key, r.Partition, want)
		}
		want := [][2]string{
			{"mqtt-topic", "e2e/" + id + "/" + d + "/data"}, {"mqtt-qos", "1"}, {"mqtt-retain", "true"},
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
