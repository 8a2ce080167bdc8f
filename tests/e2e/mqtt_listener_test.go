package e2e

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/tests/e2e/stack"
)

func readyz(addr string) (int, string) {
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestMQTTListener: a paho MQTT 5 publisher on the bridge's embedded broker gets its
// PUBACK once the record is stored (with mqtt-clientid and mqtt-username headers),
// 0x83 for a record over max-record-bytes, and 0x97 while storage-core is down (when
// /readyz answers 503); once storage-core is back, publishes succeed again, and every
// message acknowledged with success is in Kafka exactly once.
func TestMQTTListener(t *testing.T) {
	s := stack.StartT(t, stack.Options{})
	id := mqttID()
	topic := "mqtt-lis-" + id
	lis := stack.FreeAddr()
	cmds := "mqtt-cmds-" + id
	createTopic(t, newAdmin(t, s.KafkaAddrs), cmds, 1, nil)
	bridge := startBridge(t, s, "mqtt-bridge-lis", fmt.Sprintf(`
id: lis
store-timeout: 2s
listener:
  addr: %[1]s
mqtt-to-kafka:
  - id: devices
    mqtt-topic-filters: ["dev/#"]
    kafka-topic: %[2]s
    key: clientid
    max-record-bytes: 200
    headers: [mqtt-topic, mqtt-clientid, mqtt-username, mqtt-user-properties]
kafka-to-mqtt:
  - id: to-devices
    kafka-topics: [%[3]s]
    mqtt-topic: "cmd/${KAFKA_KEY}"
    start-at: earliest
    properties: {content-type: text/plain, user-properties: [{name: from, value: kafka}]}
`, lis, topic, cmds))
	ctx := ctxT(t, 2*time.Minute)
	c, err := pahoConnect(ctx, lis, "dev-"+id, "alice")
	if err != nil {
		t.Fatalf("connect to the listener: %v", err)
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	pub := func(payload string) byte {
		t.Helper()
		pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		resp, err := c.Publish(pctx, &paho.Publish{QoS: 1, Topic: "dev/" + id + "/temp", Payload: []byte(payload),
			Properties: &paho.PublishProperties{User: paho.UserProperties{{Key: "unit", Value: "C"}}}})
		if resp != nil {
			return resp.ReasonCode
		}
		t.Fatalf("publish %q: %v", payload, err)
		return 0
	}
	// kafka-to-mqtt into the listener: a record produced with kgo reaches a subscriber.
	sub := startMosqSub(t, lis, "-t", "cmd/#", "-q", "1")
	if err := newClient(t, s.KafkaAddrs).ProduceSync(ctx, &kgo.Record{Topic: cmds, Key: []byte("dev-" + id), Value: []byte("reboot")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if got, want := sub.next(t, 1, 30*time.Second)[0], "cmd/dev-"+id+"|q=1|r=0|ct=text/plain|cd=|exp=|pf=|rt=|up=from:kafka|"+hex.EncodeToString([]byte("reboot")); got != want {
		t.Errorf("kafka-to-mqtt on the listener:\n got %s\nwant %s", got, want)
	}

	acked := []string{}
	if rc := pub("21.5"); rc != 0 {
		t.Fatalf("PUBACK reason %#x, want 0", rc)
	}
	acked = append(acked, "21.5")
	if rc := pub(strings.Repeat("x", 300)); rc != 0x83 {
		t.Errorf("oversize: PUBACK reason %#x, want 0x83", rc)
	}

	if err := s.KillStorage(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "/readyz 503 naming storage-core", func() bool {
		code, body := readyz(bridge.HTTPAddr)
		return code == http.StatusServiceUnavailable && strings.Contains(body, "storage-core")
	})
	start := time.Now()
	if rc := pub("while-down"); rc != 0x97 {
		t.Errorf("storage down: PUBACK reason %#x, want 0x97", rc)
	}
	t.Logf("0x97 after %v with storage-core down (store-timeout 2s)", time.Since(start).Round(time.Millisecond))
	// An MQTT 3.1.1 publisher cannot be told: it is acknowledged and the refusal counted.
	before := bridgeMetric(t, bridge, "tributary_mqtt_refused_total", "devices")
	mosqPub(t, lis, "-V", "mqttv311", "-q", "1", "-t", "dev/"+id+"/v311", "-m", "old-client")
	if got := bridgeMetric(t, bridge, "tributary_mqtt_refused_total", "devices"); got != before+1 {
		t.Errorf("MQTT 3.1.1 refusal: refused_total %v → %v, want +1", before, got)
	}
	if err := s.RestartStorage(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "/readyz 200", func() bool { code, _ := readyz(bridge.HTTPAddr); return code == http.StatusOK })
	for i := 0; ; i++ {
		p := fmt.Sprintf("after-%d", i)
		rc := pub(p)
		if rc == 0 {
			acked = append(acked, p)
			break
		}
		if rc != 0x97 || i > 50 {
			t.Fatalf("after storage restart: PUBACK reason %#x", rc)
		}
	}
	recs := consumeAll(t, s.KafkaAddrs, topic)
	var values []string
	for _, r := range recs {
		values = append(values, string(r.Value))
		if string(r.Value) == "old-client" {
			continue // the MQTT 3.1.1 publisher's (see below)
		}
		if string(r.Key) != "dev-"+id {
			t.Errorf("key %q, want the client id", r.Key)
		}
		want := [][2]string{{"mqtt-topic", "dev/" + id + "/temp"}, {"mqtt-clientid", "dev-" + id}, {"mqtt-username", "alice"}, {"unit", "C"}}
		if got := headerList(r); !reflect.DeepEqual(got, want) {
			t.Errorf("headers %q, want %q", got, want)
		}
	}
	for _, a := range acked {
		n := 0
		for _, v := range values {
			if v == a {
				n++
			}
		}
		if n != 1 {
			t.Errorf("acknowledged message %q is in Kafka %d times, want 1 (all: %q)", a, n, values)
		}
	}
	// Refused after store-timeout while storage-core was down, these two were not
	// known to be stored: the bridge goes on sending their Append until storage-core
	// answers, so each may be there, once.
	for _, refused := range []string{"while-down", "old-client"} {
		n := 0
		for _, v := range values {
			if v == refused {
				n++
			}
		}
		if n > 1 {
			t.Errorf("refused message %q is in Kafka %d times, want at most 1", refused, n)
		}
	}
	if got := bridgeMetric(t, bridge, "tributary_mqtt_too_large_total", "devices"); got != 1 {
		t.Errorf("too_large_total = %v, want 1", got)
	}
	if got := bridgeMetric(t, bridge, "tributary_mqtt_refused_total", "devices"); got < 2 {
		t.Errorf("refused_total = %v, want ≥ 2", got)
	}
}
