package e2e

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

// TestMQTTListenerEvents: with listener.events.enabled and a mapping of "$events/#"
// into a Kafka topic, a mosquitto_sub that connects, subscribes and disconnects (-E)
// shows up as connected, subscribed (its filter, granted QoS 1), disconnected, in
// that order, with its client id and protocol version, both to a subscriber of
// $events/# and in Kafka; a subscriber of # gets none of them (MQTT 5 §4.7.2) but an
// ordinary publish; a client's publish to an event topic is refused (0x87) and not
// stored.
func TestMQTTListenerEvents(t *testing.T) {
	s := stack.StartT(t, stack.Options{})
	topic := "mqtt-events-" + mqttID()
	lis := stack.FreeAddr()
	startBridge(t, s, "mqtt-bridge-events", fmt.Sprintf(`
id: events
listener:
  addr: %s
  events: {enabled: true}
mqtt-to-kafka:
  - id: events
    mqtt-topic-filters: ["$events/#"]
    kafka-topic: %s
`, lis, topic))
	watch := startMosqSub(t, lis, "-t", "$events/#")
	all := startMosqSub(t, lis, "-t", "#")
	if out, err := mosq(t, "mosquitto_sub", lis, "-i", "ev-client", "-u", "dev", "-t", "plant/1/#", "-q", "1", "-E"); err != nil {
		t.Fatalf("mosquitto_sub -E: %v\n%s", err, out)
	}

	want := []string{"connected", "subscribed", "disconnected"}
	var got []event
	deadline := time.After(20 * time.Second)
	for len(got) < len(want) {
		select {
		case l := <-watch.lines:
			f := strings.Split(l, "|")
			if !strings.HasPrefix(f[0], "$events/client/ev-client/") {
				continue
			}
			e := decodeEvent(t, f[len(f)-1])
			if f[0] != "$events/client/ev-client/"+e.Event {
				t.Errorf("event %q on topic %s", e.Event, f[0])
			}
			got = append(got, e)
		case <-deadline:
			t.Fatalf("events of ev-client within 20s: %+v", got)
		}
	}
	checkEvents(t, "subscriber of $events/#", got, want)
	if got[1].Subscriptions == nil || got[1].Subscriptions[0].Filter != "plant/1/#" || got[1].Subscriptions[0].Code != 1 {
		t.Errorf("subscribed event: %+v", got[1])
	}

	mosqPub(t, lis, "-t", "plant/1/x", "-m", "hello", "-q", "1")
	if l := all.next(t, 1, 10*time.Second)[0]; !strings.HasPrefix(l, "plant/1/x|") {
		t.Fatalf("subscriber of # got %q, want the publish to plant/1/x (and no event)", l)
	}
	select {
	case l := <-all.lines:
		t.Fatalf("subscriber of # got more: %q", l)
	case <-time.After(time.Second):
	}

	// A client cannot pass off a message as an event.
	out, err := mosq(t, "mosquitto_pub", lis, "-t", "$events/client/ev-client/connected", "-m", "{}", "-q", "1", "-d")
	if !strings.Contains(out, "RC:135") {
		t.Errorf("publish to an event topic: %v, want PUBACK 0x87 (RC:135)\n%s", err, out)
	}

	var stored []event
	waitFor(t, 20*time.Second, "the 3 events in Kafka", func() bool {
		stored = stored[:0]
		for _, r := range consumeAll(t, s.KafkaAddrs, topic) {
			if string(r.Value) == "{}" {
				t.Fatalf("the refused publish to an event topic was stored: %+v", r)
			}
			var e event
			if json.Unmarshal(r.Value, &e) == nil && e.ClientID == "ev-client" {
				stored = append(stored, e)
			}
		}
		return len(stored) >= 3
	})
	checkEvents(t, "Kafka", stored, want)
}

// event is the JSON payload of a listener event.
type event struct {
	Event         string `json:"event"`
	ClientID      string `json:"clientid"`
	Username      string `json:"username"`
	Remote        string `json:"remote"`
	Protocol      int    `json:"protocol"`
	Reason        string `json:"reason"`
	Subscriptions []struct {
		Filter string `json:"filter"`
		Code   int    `json:"code"`
	} `json:"subscriptions"`
}

func decodeEvent(t *testing.T, hexPayload string) event {
	t.Helper()
	var e event
	p, err := hex.DecodeString(hexPayload)
	if err == nil {
		err = json.Unmarshal(p, &e)
	}
	if err != nil {
		t.Fatalf("event payload %q: %v", hexPayload, err)
	}
	return e
}

func checkEvents(t *testing.T, where string, got []event, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d events %+v, want %q", where, len(got), got, want)
	}
	for i, e := range got {
		if e.Event != want[i] || e.ClientID != "ev-client" || e.Username != "dev" || e.Protocol != 5 || e.Remote == "" {
			t.Errorf("%s: event %d = %+v, want %s of ev-client (user dev, MQTT 5, with its address)", where, i, e, want[i])
		}
	}
}

// mosq runs the mosquitto client bin (-V 5) against addr with args.
func mosq(t *testing.T, bin, addr string, args ...string) (string, error) {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	out, err := exec.Command(testenv.RequireBinary(t, bin), append([]string{"-V", "5", "-h", host, "-p", port}, args...)...).CombinedOutput()
	return string(out), err
}
