package template

import (
	"errors"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestExpandMQTT(t *testing.T) {
	for _, tc := range []struct{ src, topic, client, want string }{
		{"${MQTT_TOPIC}", "a/b/c", "c1", "a/b/c"},
		{"${MQTT_CLIENTID}", "a/b", "dev-7", "dev-7"},
		{"${MQTT_TOPIC_LEVEL_1}/${MQTT_TOPIC_LEVEL_3}", "spBv1.0/plant1/NDATA/edge4/dev2", "", "plant1/edge4"},
		{"x-${MQTT_TOPIC_LEVEL_9}-y", "a/b", "", "x--y"},
		{"cost $$5 ${MQTT_TOPIC_LEVEL_0}", "a/b", "", "cost $5 a"},
		{"plain", "a", "", "plain"},
	} {
		tp, err := Compile(tc.src, MQTT)
		if err != nil {
			t.Fatalf("Compile(%q): %v", tc.src, err)
		}
		if got := tp.ExpandMQTT(tc.topic, tc.client); got != tc.want {
			t.Errorf("%q on %q = %q, want %q", tc.src, tc.topic, got, tc.want)
		}
	}
}

func TestExpandKafka(t *testing.T) {
	tp, err := Compile("cmd/${KAFKA_TOPIC}/${KAFKA_KEY}", Kafka)
	if err != nil {
		t.Fatal(err)
	}
	if got := tp.ExpandKafka("orders", []byte("k1")); got != "cmd/orders/k1" {
		t.Errorf("got %q", got)
	}
	if got := tp.ExpandKafka("orders", nil); got != "cmd/orders/" {
		t.Errorf("null key: got %q", got)
	}
}

func TestCompileErrors(t *testing.T) {
	for _, tc := range []struct {
		src  string
		vars Vars
	}{
		{"${MQTT_TOPIK}", MQTT},
		{"${MQTT_TOPIC", MQTT},
		{"a$b", MQTT},
		{"${MQTT_TOPIC_LEVEL_x}", MQTT},
		{"${MQTT_TOPIC_LEVEL_-1}", MQTT},
		{"${KAFKA_TOPIC}", MQTT},
		{"${MQTT_TOPIC}", Kafka},
	} {
		if _, err := Compile(tc.src, tc.vars); !errors.Is(err, ErrTemplate) {
			t.Errorf("Compile(%q) = %v, want ErrTemplate", tc.src, err)
		}
	}
}
