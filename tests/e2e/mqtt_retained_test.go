package e2e

import (
	"context"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/tributary/tributary/tests/e2e/stack"
)

// retainedBridgeConfig is a listener bridge keeping its retained messages in topic.
func retainedBridgeConfig(id, lis, topic string) string {
	return fmt.Sprintf(`
id: %s
store-timeout: 5s
listener:
  addr: %s
  retained:
    store: kafka
    topic: %s
`, id, lis, topic)
}

// retainedSet subscribes a new mosquitto_sub to filter on addr and returns the
// retained messages it gets (topic → payload), failing unless exactly want arrive
// (and nothing more within a second).
func retainedSet(t *testing.T, addr, filter string, want int) map[string]string {
	t.Helper()
	sub := startMosqSub(t, addr, "-t", filter, "-q", "1")
	got := map[string]string{}
	for _, l := range sub.next(t, want, 30*time.Second) {
		tp, payload, ok := retainedLine(l)
		if !ok {
			t.Fatalf("not a retained message line: %q", l)
		}
		got[tp] = payload
	}
	select {
	case l, ok := <-sub.lines:
		if ok {
			t.Fatalf("more than %d retained messages: %q", want, l)
		}
	case <-time.After(time.Second):
	}
	return got
}

// TestMQTTRetainedKafkaStore: with listener.retained.store kafka, 550 retained
// messages are published with paho (QoS 1, each acknowledged) and 50 of them cleared
// with mosquitto_pub -r -n; the retained topic was created compacted. The bridge is
// killed with SIGKILL and started again: a new mosquitto_sub gets exactly the 500
// left, with their payloads, and none of the cleared ones. A second replica reading
// the same topic serves the same 500; a message retained through one replica, and a
// clear through the other, are then served by both.
func TestMQTTRetainedKafkaStore(t *testing.T) {
	s := stack.StartT(t, stack.Options{})
	id := mqttID()
	topic := "mqtt-retained-" + id
	lis := stack.FreeAddr()
	bridge := startBridge(t, s, "mqtt-bridge-retained", retainedBridgeConfig("ret-a", lis, topic))
	ctx := ctxT(t, 3*time.Minute)

	c, err := pahoConnect(ctx, lis, "ret-pub", "")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i := 0; i < 550; i++ {
		tp, payload := fmt.Sprintf("ret/%d", i), fmt.Sprintf("v%d-%s", i, id)
		resp, err := c.Publish(ctx, &paho.Publish{QoS: 1, Retain: true, Topic: tp, Payload: []byte(payload)})
		if err != nil || resp.ReasonCode != 0 {
			t.Fatalf("publish %s: %v %+v", tp, err, resp)
		}
		want[tp] = payload
	}
	_ = c.Disconnect(&paho.Disconnect{})
	for i := 500; i < 550; i++ {
		tp := fmt.Sprintf("ret/%d", i)
		mosqPub(t, lis, "-t", tp, "-r", "-n", "-q", "1")
		delete(want, tp)
	}
	cfgs, err := newAdmin(t, s.KafkaAddrs).DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := cfgs.On(topic, nil); err != nil || !hasConfig(v.Configs, "cleanup.policy", "compact") {
		t.Errorf("retained topic %s configs: %+v (%v); want cleanup.policy=compact", topic, v.Configs, err)
	}
	if got := retainedSet(t, lis, "ret/#", 500); !equalSets(got, want) {
		t.Fatalf("before the kill: %d retained, differing from the 500 published", len(got))
	}

	if err := s.Kill(bridge.Name, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(context.Background(), bridge.Name); err != nil {
		t.Fatal(err)
	}
	if got := retainedSet(t, lis, "ret/#", 500); !equalSets(got, want) {
		t.Fatalf("after kill -9 and restart: %s", diffSets(got, want))
	}

	lis2 := stack.FreeAddr()
	startBridge(t, s, "mqtt-bridge-retained-2", retainedBridgeConfig("ret-b", lis2, topic))
	if got := retainedSet(t, lis2, "ret/#", 500); !equalSets(got, want) {
		t.Fatalf("second replica: %s", diffSets(got, want))
	}

	// Set through one replica, cleared through the other: both follow the topic.
	mosqPub(t, lis2, "-t", "ret/new", "-r", "-q", "1", "-m", "from-b")
	mosqPub(t, lis, "-t", "ret/0", "-r", "-n", "-q", "1")
	want["ret/new"] = "from-b"
	delete(want, "ret/0")
	for _, addr := range []string{lis, lis2} {
		var got map[string]string
		waitFor(t, 20*time.Second, "both replicas follow the retained topic", func() bool {
			got = retainedSetNow(t, addr, "ret/#")
			return equalSets(got, want)
		})
	}
}

// retainedSetNow is the retained set a new subscriber to filter on addr gets within
// a second of its SUBACK.
func retainedSetNow(t *testing.T, addr, filter string) map[string]string {
	t.Helper()
	sub := startMosqSub(t, addr, "-t", filter, "-q", "1")
	defer func() { _ = sub.cmd.Process.Kill() }()
	got := map[string]string{}
	for {
		select {
		case l := <-sub.lines:
			if tp, payload, ok := retainedLine(l); ok {
				got[tp] = payload
			}
		case <-time.After(time.Second):
			return got
		}
	}
}

// retainedLine is the topic and payload of a mosquitto_sub line (mqttFormat) of a
// retained message.
func retainedLine(l string) (topic, payload string, ok bool) {
	f := strings.Split(l, "|")
	if len(f) < 3 || f[2] != "r=1" {
		return "", "", false
	}
	p, err := hex.DecodeString(f[len(f)-1])
	return f[0], string(p), err == nil
}

func equalSets(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// diffSets names what got lacks, and has beyond or unlike want (10 of each at most).
func diffSets(got, want map[string]string) string {
	var missing, extra []string
	for k, v := range want {
		if got[k] != v {
			missing = append(missing, k)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	return fmt.Sprintf("%d retained; missing or different %d %q, not wanted %d %q", len(got), len(missing), head(missing, 10), len(extra), head(extra, 10))
}

func head(s []string, n int) []string { return s[:min(n, len(s))] }

func hasConfig(cs []kadm.Config, key, value string) bool {
	for _, c := range cs {
		if c.Key == key && c.Value != nil && *c.Value == value {
			return true
		}
	}
	return false
}
