package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

// TestMQTTListenerLargeMessagesCoalesced: many publishers of 200 KiB messages on one
// partition at once: every publish is acknowledged with success, though together they
// are larger than the channel's max_message_bytes (1 MiB by default).
func TestMQTTListenerLargeMessagesCoalesced(t *testing.T) {
	s := stack.StartT(t, stack.Options{})
	id := mqttID()
	topic := "mqtt-big-" + id
	lis := stack.FreeAddr()
	startBridge(t, s, "mqtt-bridge-big", fmt.Sprintf(`
id: big
store-timeout: 10s
listener:
  addr: %[1]s
mqtt-to-kafka:
  - id: big
    mqtt-topic-filters: ["big/#"]
    kafka-topic: %[2]s
    partitions: 1
`, lis, topic))
	ctx := ctxT(t, 2*time.Minute)
	const publishers, each = 20, 5
	payload := []byte(strings.Repeat("x", 200<<10))
	var wg sync.WaitGroup
	codes := make(chan byte, publishers*each)
	for i := range publishers {
		c, err := pahoConnect(ctx, lis, fmt.Sprintf("big-%s-%d", id, i), "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				resp, err := c.Publish(pctx, &paho.Publish{QoS: 1, Topic: "big/x", Payload: payload})
				cancel()
				if resp == nil {
					t.Errorf("publish: %v", err)
					return
				}
				codes <- resp.ReasonCode
			}
		}()
	}
	wg.Wait()
	close(codes)
	refused := 0
	for rc := range codes {
		if rc != 0 {
			refused++
		}
	}
	if refused > 0 {
		t.Fatalf("%d of %d publishes refused", refused, publishers*each)
	}
}

// TestMQTTUpstreamLargeMessages: 20 messages of 200 KiB published to Mosquitto in a
// burst, more than one Append may carry together, are all stored, in order.
func TestMQTTUpstreamLargeMessages(t *testing.T) {
	testenv.RequireMQTT(t)
	s := sharedStack(t)
	id := mqttID()
	topic := "mqtt-big-up-" + id
	bridge := startBridge(t, s, "mqtt-bridge-big-up-"+id, fmt.Sprintf(`
id: big-up-%[1]s
clusters:
  - name: mosquitto
    urls: [mqtt://%[2]s]
    client-id: tributary-e2e-big-%[1]s
mqtt-to-kafka:
  - id: big
    mqtt-topic-filters: ["e2e/%[1]s/big/#"]
    kafka-topic: %[3]s
    partitions: 1
`, id, testenv.MQTTAddr(), topic))
	ctx := ctxT(t, 2*time.Minute)
	c, err := pahoConnect(ctx, testenv.MQTTAddr(), "e2e-big-pub-"+id, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	// The bridge subscribes after it connected: publish once a first message is stored.
	waitFor(t, 30*time.Second, "bridge subscribed", func() bool {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, _ = c.Publish(pctx, &paho.Publish{QoS: 1, Topic: "e2e/" + id + "/big/probe", Payload: []byte("probe")})
		return bridgeMetric(t, bridge, "tributary_mqtt_stored_total", "big") > 0
	})
	const n = 20
	pad := strings.Repeat("x", 200<<10)
	for i := range n {
		pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		_, err := c.Publish(pctx, &paho.Publish{QoS: 1, Topic: "e2e/" + id + "/big/x", Payload: []byte(fmt.Sprintf("%03d-%s", i, pad))})
		cancel()
		if err != nil {
			t.Fatalf("publish %d to Mosquitto: %v", i, err)
		}
	}
	var got []string
	waitFor(t, 30*time.Second, "the large messages stored", func() bool {
		got = got[:0]
		for _, r := range consumeAll(t, s.KafkaAddrs, topic) {
			if v := string(r.Value); v != "probe" {
				got = append(got, v[:3])
			}
		}
		return len(got) >= n
	})
	for i, v := range got {
		if want := fmt.Sprintf("%03d", i); v != want {
			t.Fatalf("record %d is message %s: out of order or duplicated (%v)", i, v, got)
		}
	}
}
