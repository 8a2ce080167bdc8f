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
