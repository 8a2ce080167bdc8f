package e2e

import (
	"context"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

// TestMQTTCoordinatorKilled: with the coordinator killed (-9), listener publishes to
// a topic the bridge already knows are still stored (the partition count is cached),
// /readyz says 503, and after the restart it is 200 again; every success is in Kafka.
func TestMQTTCoordinatorKilled(t *testing.T) {
	testenv.RequireMQTT(t)
	s := stack.StartT(t, stack.Options{})
	id := mqttID()
	topic := "mqtt-coord-" + id
	lis := stack.FreeAddr()
	bridge := startBridge(t, s, "mqtt-bridge-coord", fmt.Sprintf(`
id: coord-%[1]s
store-timeout: 2s
listener:
  addr: %[2]s
mqtt-to-kafka:
  - id: lis
    source: listener
    mqtt-topic-filters: ["coord/#"]
    kafka-topic: %[3]s
`, id, lis, topic))
	ready := func() int {
		resp, err := http.Get("http://" + bridge.HTTPAddr + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	ctx := ctxT(t, time.Minute)
	c, err := pahoConnect(ctx, lis, "coord-pub", "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Disconnect(&paho.Disconnect{}) }()
	var acked []string
	pub := func(p string) byte {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := c.Publish(pctx, &paho.Publish{QoS: 1, Topic: "coord/x", Payload: []byte(p)})
		if err != nil && resp == nil {
			t.Fatalf("publish %s: %v", p, err)
		}
		if resp.ReasonCode == 0 {
			acked = append(acked, p)
		}
		return resp.ReasonCode
	}
	for i := 0; i < 10; i++ {
		if rc := pub(fmt.Sprintf("before-%d", i)); rc != 0 {
			t.Fatalf("before: %#x", rc)
		}
	}
	if err := s.Kill(stack.Coordinator, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "/readyz 503 without the coordinator", func() bool { return ready() == http.StatusServiceUnavailable })
	for i := 0; i < 10; i++ {
		if rc := pub(fmt.Sprintf("during-%d", i)); rc != 0 {
			t.Errorf("during: %#x, want 0 (known topic, cached partition count)", rc)
		}
	}
	if err := s.Restart(context.Background(), stack.Coordinator); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "/readyz 200 after the restart", func() bool { return ready() == http.StatusOK })
	for i := 0; i < 10; i++ {
		if rc := pub(fmt.Sprintf("after-%d", i)); rc != 0 {
			t.Errorf("after: %#x", rc)
		}
	}
	counts := kafkaCounts(t, s, topic)
	for _, a := range acked {
		if counts[a] != 1 {
			t.Errorf("%s acknowledged, %d times in Kafka", a, counts[a])
		}
	}
}
