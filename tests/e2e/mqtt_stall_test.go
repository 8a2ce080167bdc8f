package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

// TestMQTTStorageStall: storage-core is stopped (SIGSTOP, its connections stay open
// but nothing answers) for 5 s under listener publishers (two QoS 1, one QoS 2). Publishes
// are held, then answered 0x97 after store-timeout or success; /readyz is 503 during
// the stall and 200 after. A publisher answered 0x97 sends the same message again
// (a new PUBLISH, as an application does) until it succeeds: the Appends that reached
// storage-core before the stall complete after SIGCONT, so without de-duplication the
// retries would store those messages twice. Every message is in Kafka exactly once.
func TestMQTTStorageStall(t *testing.T) {
	testenv.RequireMQTT(t)
	s := stack.StartT(t, stack.Options{})
	id := mqttID()
	topic := "mqtt-stall-" + id
	lis := stack.FreeAddr()
	bridge := startBridge(t, s, "mqtt-bridge-stall", fmt.Sprintf(`
id: stall-%[1]s
store-timeout: 2s
listener:
  addr: %[2]s
mqtt-to-kafka:
  - id: lis
    source: listener
    mqtt-topic-filters: ["stall/#"]
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
	ctx := ctxT(t, 2*time.Minute)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var acked []string
	refused, retriedOK := 0, 0
	for p := 0; p < 3; p++ {
		c, err := pahoConnect(ctx, lis, fmt.Sprintf("stall-%d", p), "")
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { _ = c.Disconnect(&paho.Disconnect{}) }()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				payload := fmt.Sprintf("s%d-%d", p, i)
				qos := byte(1 + p/2) // publishers 0 and 1 QoS 1, publisher 2 QoS 2
				for attempt := 0; ; attempt++ {
					pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
					resp, err := c.Publish(pctx, &paho.Publish{QoS: qos, Topic: fmt.Sprintf("stall/%d", p), Payload: []byte(payload)})
					cancel()
					if resp == nil {
						t.Errorf("publish %s: %v", payload, err)
						return
					}
					rc := resp.ReasonCode
					mu.Lock()
					switch rc {
					case 0:
						acked = append(acked, payload)
						if attempt > 0 {
							retriedOK++
						}
					case 0x97:
						refused++
					default:
						mu.Unlock()
						t.Errorf("publish %s: reason %#x", payload, rc)
						return
					}
					mu.Unlock()
					if rc == 0 {
						break
					}
					if attempt == 30 {
						t.Errorf("publish %s: still refused after %d attempts", payload, attempt+1)
						return
					}
				}
			}
		}()
	}
	waitFor(t, 30*time.Second, "100 stored", func() bool { return bridgeMetric(t, bridge, "tributary_mqtt_stored_total", "lis") >= 100 })
	sc, err := s.Proc(stack.StorageCore)
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stalled := time.Now()
	waitFor(t, 10*time.Second, "/readyz 503 while storage-core is stopped", func() bool { return ready() == http.StatusServiceUnavailable })
	time.Sleep(time.Until(stalled.Add(5 * time.Second)))
	mu.Lock()
	refusedDuring := refused
	mu.Unlock()
	if err := sc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "/readyz 200 after SIGCONT", func() bool { return ready() == http.StatusOK })
	mu.Lock()
	n := len(acked)
	mu.Unlock()
	waitFor(t, 30*time.Second, "100 more successes after SIGCONT", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= n+100
	})
	close(stop)
	wg.Wait()
	counts := kafkaCounts(t, s, topic)
	var missing, dup []string
	for _, a := range acked {
		switch counts[a] {
		case 1:
		case 0:
			missing = append(missing, a)
		default:
			dup = append(dup, a)
		}
	}
	stored := 0
	for _, n := range counts {
		stored += n
	}
	dedup := bridgeMetric(t, bridge, "tributary_mqtt_deduplicated_total", "lis")
	t.Logf("storage-core stopped 5s: %d messages acknowledged (%d of them after 0x97 and a retry), %d answers 0x97 (%d during the stall); Kafka holds %d records; %d retries answered from an in-doubt append; missing %d, duplicated %d",
		len(acked), retriedOK, refused, refusedDuring, stored, int(dedup), len(missing), len(dup))
	if len(missing) > 0 || len(dup) > 0 {
		t.Errorf("exactly once broken: missing %v, duplicated %v", first(missing, 10), first(dup, 10))
	}
	if stored != len(acked) {
		t.Errorf("Kafka holds %d records for %d acknowledged messages", stored, len(acked))
	}
	if refusedDuring == 0 {
		t.Errorf("no 0x97 during a 5 s stall with store-timeout 2s")
	}
}
