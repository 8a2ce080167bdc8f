package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

// TestMQTTKafkaTopicRecreated: a Kafka topic that kafka-to-mqtt consumes is deleted
// and created again while the bridge runs; records produced to the new topic still
// reach MQTT (the old position, past the new log's end, is not waited on for ever),
// and records with keys that make invalid topics are skipped, not retried.
func TestMQTTKafkaTopicRecreated(t *testing.T) {
	testenv.RequireMQTT(t)
	s := stack.StartT(t, stack.Options{})
	id := mqttID()
	topic := "mqtt-recreate-" + id
	lis := stack.FreeAddr()
	ctx := ctxT(t, 2*time.Minute)
	adm := newAdmin(t, s.KafkaAddrs)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	bridge := startBridge(t, s, "mqtt-bridge-recreate", fmt.Sprintf(`
id: recreate-%[1]s
store-timeout: 2s
listener:
  addr: %[2]s
kafka-to-mqtt:
  - id: back
    kafka-topics: [%[3]s]
    mqtt-topic: "rc/${KAFKA_KEY}"
    start-at: earliest
`, id, lis, topic))
	sub := startMosqSub(t, lis, "-t", "rc/#", "-q", "1")
	cl := newClient(t, s.KafkaAddrs)
	produce := func(key, value string) {
		t.Helper()
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(value)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// Poison keys first: each is skipped and counted, the good record after them arrives.
	for _, k := range []string{"+", "a/#", "x\x00y", "\xff"} {
		produce(k, "bad")
	}
	for i := 0; i < 5; i++ {
		produce("old", fmt.Sprintf("old-%d", i))
	}
	if got := sub.next(t, 5, 30*time.Second); len(got) != 5 {
		t.Fatalf("before the delete: %v", got)
	}
	if n := bridgeMetric(t, bridge, "tributary_mqtt_invalid_total", "back"); n != 4 {
		t.Errorf("invalid_total %v, want 4", n)
	}
	if _, err := adm.DeleteTopics(ctx, topic); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if _, err := adm.CreateTopic(context.Background(), 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	produce("new", "new-0")
	got := sub.next(t, 1, 30*time.Second)
	if len(got) != 1 {
		t.Fatalf("after the topic was created again: %v", got)
	}
}
