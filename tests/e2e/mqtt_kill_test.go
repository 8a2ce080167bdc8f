package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

const killMessages = 3000

// kafkaCounts reads topic whole and counts each value.
func kafkaCounts(t *testing.T, s *stack.Stack, topic string) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for _, r := range consumeAll(t, s.KafkaAddrs, topic) {
		counts[string(r.Value)]++
	}
	return counts
}

// waitKafkaTotal waits until topic's end offsets add up to at least n.
func waitKafkaTotal(t *testing.T, s *stack.Stack, topic string, n int64, timeout time.Duration) {
	t.Helper()
	adm := newAdmin(t, s.KafkaAddrs)
	waitFor(t, timeout, fmt.Sprintf("%d records in %s", n, topic), func() bool {
		lo, err := adm.ListEndOffsets(ctxT(t, 10*time.Second), topic)
		if err != nil {
			return false
		}
		var sum int64
		lo.Each(func(o kadm.ListedOffset) { sum += o.Offset })
		return sum >= n
	})
}

// TestMQTTKillListenerExactlyOnce: 10 MQTT 5 publishers send 3,000 messages to the
// bridge's listener, once at QoS 1 and once at QoS 2; the bridge is killed with
// SIGKILL when 1,000 are acknowledged and started again; publishers reconnect (clean
// start: the listener's sessions do not outlive the process, so nothing is sent
// again) and go on with their next message (a message is acknowledged at most once).
// Every message acknowledged with success is in Kafka exactly once; the counts are
// reported.
func TestMQTTKillListenerExactlyOnce(t *testing.T) {
	for _, qos := range []byte{1, 2} {
		t.Run(fmt.Sprintf("QoS%d", qos), func(t *testing.T) { killListener(t, qos) })
	}
}

func killListener(t *testing.T, qos byte) {
	s := stack.StartT(t, stack.Options{})
	id := mqttID()
	topic := fmt.Sprintf("mqtt-kill-lis%d-%s", qos, id)
	lis := stack.FreeAddr()
	bridge := startBridge(t, s, "mqtt-bridge-kill-lis", fmt.Sprintf(`
id: kill-lis
listener:
  addr: %s
mqtt-to-kafka:
  - id: load
    mqtt-topic-filters: ["load/#"]
    kafka-topic: %s
    partitions: 3
`, lis, topic))
	const publishers = 10
	var ackedN atomic.Int64
	acked := make([][]string, publishers)
	var refused, lost atomic.Int64
	killed := make(chan struct{})
	restarted := make(chan struct{})
	ctx := ctxT(t, 3*time.Minute)
	var wg sync.WaitGroup
	for p := 0; p < publishers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c *paho.Client
			defer func() {
				if c != nil {
					_ = c.Disconnect(&paho.Disconnect{})
				}
			}()
			for i := 0; i < killMessages/publishers; i++ {
				for c == nil {
					var err error
					if c, err = pahoConnect(ctx, lis, fmt.Sprintf("pub-%d", p), ""); err != nil {
						c = nil
						select {
						case <-restarted:
						case <-ctx.Done():
							return
						}
					}
				}
				payload := fmt.Sprintf("p%d-%d", p, i)
				pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
				resp, err := c.Publish(pctx, &paho.Publish{QoS: qos, Topic: fmt.Sprintf("load/%d", p), Payload: []byte(payload)})
				cancel()
				switch {
				case err == nil && resp != nil && resp.ReasonCode == 0:
					acked[p] = append(acked[p], payload)
					ackedN.Add(1)
				case resp != nil && resp.ReasonCode >= 0x80:
					refused.Add(1)
				default: // connection lost: the fate of this message is unknown
					lost.Add(1)
					_ = c.Disconnect(&paho.Disconnect{})
					c = nil
				}
			}
		}()
	}
	go func() {
		defer close(restarted)
		waitFor(t, time.Minute, "1000 acknowledged", func() bool { return ackedN.Load() >= 1000 })
		if err := s.Kill(bridge.Name, syscall.SIGKILL); err != nil {
			t.Error(err)
		}
		close(killed)
		if err := s.Restart(context.Background(), bridge.Name); err != nil {
			t.Error(err)
		}
	}()
	wg.Wait()
	<-restarted
	select {
	case <-killed:
	default:
		t.Fatal("the bridge was never killed")
	}
	counts := kafkaCounts(t, s, topic)
	var missing, dup []string
	total := 0
	for _, list := range acked {
		for _, a := range list {
			total++
			switch counts[a] {
			case 1:
			case 0:
				missing = append(missing, a)
			default:
				dup = append(dup, a)
			}
		}
	}
	stored := 0
	for _, n := range counts {
		stored += n
	}
	t.Logf("listener kill -9, QoS %d: %d sent, %d acknowledged with success, %d refused (0x97), %d unanswered (connection lost); Kafka holds %d records; acknowledged but missing %d, duplicated %d",
		qos, killMessages, total, refused.Load(), lost.Load(), stored, len(missing), len(dup))
	if len(missing) > 0 || len(dup) > 0 {
		t.Errorf("exactly once broken: missing %v, duplicated %v", first(missing, 10), first(dup, 10))
	}
	if total < 1000 {
		t.Errorf("only %d acknowledged", total)
	}
}

// TestMQTTKillUpstreamAtLeastOnce: a paho publisher sends 3,000 QoS 1 messages to
// Mosquitto (about 1,000 a second, under Mosquitto's default queue of 1,000 messages
// per session); the bridge, subscribed with a persistent session, is killed with
// SIGKILL once 1,000 are in Kafka and started again. Every message Mosquitto
// acknowledged reaches Kafka (at least once; duplicates are counted).
func TestMQTTKillUpstreamAtLeastOnce(t *testing.T) {
	testenv.RequireMQTT(t)
	s := sharedStack(t)
	id := mqttID()
	topic := "mqtt-kill-up-" + id
	bridge := startBridge(t, s, "mqtt-bridge-kill-up-"+id, fmt.Sprintf(`
id: kill-up-%[1]s
clusters:
  - name: mosquitto
    urls: [mqtt://%[2]s]
    client-id: tributary-e2e-kill-%[1]s
    session-expiry: 2m
    session-dir: %[4]s
mqtt-to-kafka:
  - id: load
    mqtt-topic-filters: ["e2e/%[1]s/load/#"]
    kafka-topic: %[3]s
`, id, testenv.MQTTAddr(), topic, filepath.Join(t.TempDir(), "session")))
	ctx := ctxT(t, 3*time.Minute)
	c, err := pahoConnect(ctx, testenv.MQTTAddr(), "e2e-kill-pub-"+id, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	var sent atomic.Int64
	done := make(chan error, 1)
	go func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for i := 0; i < killMessages; i++ {
			<-tick.C
			pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			_, err := c.Publish(pctx, &paho.Publish{QoS: 1, Topic: fmt.Sprintf("e2e/%s/load/%d", id, i%7), Payload: []byte(fmt.Sprintf("m-%d", i))})
			cancel()
			if err != nil {
				done <- fmt.Errorf("publish %d to Mosquitto: %w", i, err)
				return
			}
			sent.Add(1)
		}
		done <- nil
	}()
	waitFor(t, time.Minute, "1000 stored", func() bool { return bridgeMetric(t, bridge, "tributary_mqtt_stored_total", "load") >= 1000 })
	if err := s.Kill(bridge.Name, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	atKill := sent.Load()
	if err := s.Restart(context.Background(), bridge.Name); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitKafkaTotal(t, s, topic, killMessages, time.Minute)
	// Duplicates count toward the total: read until every message is there (or 30 s).
	var missing []string
	dups, stored := 0, 0
	for deadline := time.Now().Add(30 * time.Second); ; {
		counts := kafkaCounts(t, s, topic)
		missing, dups, stored = nil, 0, 0
		for i := 0; i < killMessages; i++ {
			n := counts[fmt.Sprintf("m-%d", i)]
			stored += n
			if n == 0 {
				missing = append(missing, fmt.Sprintf("m-%d", i))
			}
			if n > 1 {
				dups += n - 1
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		<-time.After(200 * time.Millisecond)
	}
	t.Logf("upstream kill -9 after %d of %d published: Kafka holds %d records, %d distinct acknowledged messages missing, %d duplicates (redelivered after the crash)",
		atKill, killMessages, stored, len(missing), dups)
	if len(missing) > 0 {
		t.Errorf("messages acknowledged by Mosquitto but missing from Kafka: %d, e.g. %v", len(missing), first(missing, 10))
	}
}

// TestMQTTStorageOutage stops storage-core for 10 seconds while 4 publishers send QoS 1 and 2
// messages to the listener and one sends to Mosquitto for the upstream mapping. Listener
// publishers see their acknowledgements held, then success once storage-core is back,
// or 0x97 after store-timeout (8 s: shorter than the outage, so some publishes time
// out, and longer than the rest of it, so the next ones are held until storage-core is
// back); every success is in Kafka exactly once, and every message Mosquitto took is
// in Kafka at least once.
func TestMQTTStorageOutage(t *testing.T) {
	testenv.RequireMQTT(t)
	s := stack.StartT(t, stack.Options{})
	id := mqttID()
	lisTopic, upTopic := "mqtt-out-lis-"+id, "mqtt-out-up-"+id
	lis := stack.FreeAddr()
	bridge := startBridge(t, s, "mqtt-bridge-outage", fmt.Sprintf(`
id: outage-%[1]s
store-timeout: 8s
listener:
  addr: %[2]s
clusters:
  - name: mosquitto
    urls: [mqtt://%[3]s]
    client-id: tributary-e2e-outage-%[1]s
    session-expiry: 2m
mqtt-to-kafka:
  - id: lis
    source: listener
    mqtt-topic-filters: ["load/#"]
    kafka-topic: %[4]s
  - id: up
    source: mosquitto
    mqtt-topic-filters: ["e2e/%[1]s/#"]
    kafka-topic: %[5]s
`, id, lis, testenv.MQTTAddr(), lisTopic, upTopic))
	ctx := ctxT(t, 3*time.Minute)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var acked []string
	var refused, heldOK int
	var maxHeld time.Duration
	for p := 0; p < 4; p++ {
		c, err := pahoConnect(ctx, lis, fmt.Sprintf("out-%d", p), "")
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
				payload := fmt.Sprintf("p%d-%d", p, i)
				start := time.Now()
				pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				resp, err := c.Publish(pctx, &paho.Publish{QoS: byte(1 + p%2), Topic: fmt.Sprintf("load/%d", p), Payload: []byte(payload)})
				cancel()
				took := time.Since(start)
				mu.Lock()
				switch {
				case err == nil && resp != nil && resp.ReasonCode == 0:
					acked = append(acked, payload)
					if took > time.Second {
						heldOK++
					}
					maxHeld = max(maxHeld, took)
				case resp != nil && resp.ReasonCode == 0x97:
					refused++
				default:
					mu.Unlock()
					t.Errorf("publish %s: %v (response %+v)", payload, err, resp)
					return
				}
				mu.Unlock()
			}
		}()
	}
	up, err := pahoConnect(ctx, testenv.MQTTAddr(), "e2e-outage-pub-"+id, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = up.Disconnect(&paho.Disconnect{}) })
	var upSent atomic.Int64
	wg.Add(1)
	go func() { // 50 messages a second: 500 wait in Mosquitto's session queue during the outage
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			_, err := up.Publish(pctx, &paho.Publish{QoS: 1, Topic: fmt.Sprintf("e2e/%s/up", id), Payload: []byte(fmt.Sprintf("u-%d", i))})
			cancel()
			if err != nil {
				t.Errorf("publish to Mosquitto: %v", err)
				return
			}
			upSent.Add(1)
		}
	}()
	waitFor(t, time.Minute, "200 stored", func() bool { return bridgeMetric(t, bridge, "tributary_mqtt_stored_total", "lis") >= 200 })
	if err := s.KillStorage(); err != nil {
		t.Fatal(err)
	}
	outage := time.NewTimer(10 * time.Second) // the scenario: storage-core away for 10 s
	<-outage.C
	if err := s.RestartStorage(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	n := len(acked)
	mu.Unlock()
	waitFor(t, time.Minute, "200 more successes after the restart", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= n+200
	})
	close(stop)
	wg.Wait()
	waitKafkaTotal(t, s, upTopic, upSent.Load(), time.Minute)

	counts := kafkaCounts(t, s, lisTopic)
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
	var upMissing []string
	for deadline := time.Now().Add(30 * time.Second); ; { // duplicates count toward the total
		upCounts := kafkaCounts(t, s, upTopic)
		upMissing = nil
		for i := 0; i < int(upSent.Load()); i++ {
			if upCounts[fmt.Sprintf("u-%d", i)] == 0 {
				upMissing = append(upMissing, fmt.Sprintf("u-%d", i))
			}
		}
		if len(upMissing) == 0 || time.Now().After(deadline) {
			break
		}
		<-time.After(200 * time.Millisecond)
	}
	t.Logf("storage-core down 10s: listener %d successes (%d held over 1s, longest %v), %d answered 0x97; upstream %d sent, %d missing",
		len(acked), heldOK, maxHeld.Round(time.Millisecond), refused, upSent.Load(), len(upMissing))
	if len(missing) > 0 || len(dup) > 0 {
		t.Errorf("listener: acknowledged but missing %v, duplicated %v", first(missing, 10), first(dup, 10))
	}
	if refused == 0 || heldOK == 0 {
		t.Errorf("want both held-then-successful publishes and 0x97 refusals during the outage (held %d, refused %d)", heldOK, refused)
	}
	if len(upMissing) > 0 {
		t.Errorf("upstream: %d messages Mosquitto acknowledged are missing, e.g. %v", len(upMissing), first(upMissing, 10))
	}
}

// ownMosquitto runs a private Mosquitto (no persistence) on a free port until stopped.
type ownMosquitto struct {
	addr, conf string
	cmd        *exec.Cmd
}

func (m *ownMosquitto) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command(testenv.RequireBinary(t, "mosquitto"), "-c", m.conf)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m.cmd = cmd
	waitFor(t, 10*time.Second, "mosquitto listening on "+m.addr, func() bool {
		c, err := net.DialTimeout("tcp", m.addr, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
}

func (m *ownMosquitto) stop() {
	if m.cmd != nil {
		_ = m.cmd.Process.Kill()
		_ = m.cmd.Wait()
		m.cmd = nil
	}
}

// TestMQTTUpstreamBrokerRestart: the upstream broker (a private Mosquitto without
// persistence) is killed and started again, so the bridge's session is gone; the bridge
// reconnects, subscribes again, and messages published after the restart reach Kafka.
// /readyz is 503 while the broker is away.
func TestMQTTUpstreamBrokerRestart(t *testing.T) {
	s := sharedStack(t)
	id := mqttID()
	topic := "mqtt-brk-" + id
	addr := stack.FreeAddr()
	_, port, _ := net.SplitHostPort(addr)
	m := &ownMosquitto{addr: addr, conf: filepath.Join(t.TempDir(), "mosquitto.conf")}
	if err := os.WriteFile(m.conf, []byte("listener "+port+" 127.0.0.1\nallow_anonymous true\npersistence false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m.start(t)
	t.Cleanup(m.stop)
	bridge := startBridge(t, s, "mqtt-bridge-brk-"+id, fmt.Sprintf(`
id: brk-%[1]s
clusters:
  - name: private
    urls: [mqtt://%[2]s]
mqtt-to-kafka:
  - id: brk
    mqtt-topic-filters: ["e2e/#"]
    kafka-topic: %[3]s
`, id, addr, topic))
	mosqPub(t, addr, "-q", "1", "-t", "e2e/before", "-m", "before")
	waitFor(t, 20*time.Second, "the first message stored", func() bool { return bridgeMetric(t, bridge, "tributary_mqtt_stored_total", "brk") == 1 })

	m.stop()
	waitFor(t, 20*time.Second, "/readyz 503 while the broker is down", func() bool {
		code, body := readyz(bridge.HTTPAddr)
		return code == http.StatusServiceUnavailable && strings.Contains(body, "private")
	})
	m.start(t)
	waitFor(t, 30*time.Second, "/readyz 200 after the broker is back (connected and subscribed again)", func() bool {
		code, _ := readyz(bridge.HTTPAddr)
		return code == http.StatusOK
	})
	mosqPub(t, addr, "-q", "1", "-t", "e2e/after", "-m", "after")
	waitFor(t, 20*time.Second, "the message after the restart stored", func() bool { return bridgeMetric(t, bridge, "tributary_mqtt_stored_total", "brk") == 2 })
	counts := kafkaCounts(t, s, topic)
	if counts["before"] != 1 || counts["after"] != 1 || len(counts) != 2 {
		t.Errorf("Kafka topic holds %v, want before and after once each", counts)
	}
}
