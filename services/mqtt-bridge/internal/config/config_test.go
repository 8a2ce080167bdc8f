package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/tributary/tributary/libs/tlsx/tlsxtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const good = `
id: plant
storage-addr: 127.0.0.1:7400
clusters:
  - name: site
    urls: [mqtt://127.0.0.1:1883]
listener:
  addr: 127.0.0.1:0
mqtt-to-kafka:
  - id: telemetry
    source: site
    mqtt-topic-filters: ["plant/+/telemetry/#"]
    kafka-topic: telemetry
    key: "${MQTT_TOPIC_LEVEL_1}"
    headers: all
  - id: devices
    source: listener
    mqtt-topic-filters: ["dev/#"]
    kafka-topic: devices
    key: clientid
    partition-strategy: uniform
    headers:
      - mqtt-topic
      - mqtt-user-properties
      - site: berlin
kafka-to-mqtt:
  - id: commands
    target: site
    kafka-topics: [commands]
    mqtt-topic: "cmd/${KAFKA_KEY}"
    qos: 1
    from-headers: true
`

func noEnv(string) (string, bool) { return "", false }

func TestLoadGood(t *testing.T) {
	cfg, ps := Load([]byte(good), noEnv)
	if err := ps.Err(); err != nil {
		t.Fatal(err)
	}
	if len(ps) != 0 {
		t.Errorf("unexpected warnings: %v", ps)
	}
	if cfg.Clusters[0].ClientID != "tributary-plant-site" || cfg.StoreTimeout != DefaultStoreTimeout {
		t.Errorf("defaults not applied: %+v", cfg.Clusters[0])
	}
	d := cfg.MQTTToKafka[1]
	if len(d.Headers.Names) != 2 || len(d.Headers.Fixed) != 1 || d.Headers.Fixed[0].Name != "site" || d.Headers.Fixed[0].Value != "berlin" {
		t.Errorf("headers = %+v", d.Headers)
	}
	if !cfg.MQTTToKafka[0].Headers.All {
		t.Errorf("headers all not parsed")
	}
	k := cfg.KafkaToMQTT[0]
	if k.ConsumerGroup != "tributary-commands-group" || k.StartAt != "latest" || k.MQTTTopic[0] != "cmd/${KAFKA_KEY}" {
		t.Errorf("kafka-to-mqtt = %+v", k)
	}
}

func TestUnknownKeyNamesNearestAndLine(t *testing.T) {
	src := strings.Replace(good, "    kafka-topic: telemetry", "    kafka-topik: telemetry", 1)
	_, ps := Load([]byte(src), noEnv)
	err := ps.Err()
	if err == nil {
		t.Fatal("misspelt key loaded")
	}
	var found bool
	for _, p := range ps {
		if strings.Contains(p.Msg, `unknown key "kafka-topik"; did you mean "kafka-topic"?`) {
			found = true
			if p.Line != 13 {
				t.Errorf("line = %d, want 13", p.Line)
			}
		}
	}
	if !found {
		t.Errorf("no unknown-key problem in %v", ps)
	}
}

func TestEveryProblemReported(t *testing.T) {
	src := `
clusters:
  - name: site
    urls: [mqtt://127.0.0.1:1883]
    pasword: x
mqtt-to-kafka:
  - id: a
    source: sight
    mqtt-topic-filters: ["a/#/b"]
    kafka-topic: "bad~topic"
    key: "${MQTT_TOPIK}"
  - id: a
    source: site
    mqtt-topic-filters: ["x"]
    kafka-topic: loop
kafka-to-mqtt:
  - id: back
    kafka-topic-pattern: "lo.*"
    mqtt-topic: "$$SYS/x"
`
	_, ps := Load([]byte(src), noEnv)
	want := []struct {
		line int
		sub  string
		warn bool
	}{
		{5, `unknown key "pasword"; did you mean "password"?`, false},
		{8, `unknown cluster "sight"; did you mean "site"?`, false},
		{9, `# must be alone`, false},
		{10, `invalid topic name`, false},
		{11, `unknown variable ${MQTT_TOPIK}`, false},
		{12, `mapping id "a" is used twice`, false},
		{17, `loop:`, true},
		{19, `belong to the broker`, false},
	}
	for _, w := range want {
		ok := false
		for _, p := range ps {
			if p.Line == w.line && strings.Contains(p.Msg, w.sub) && p.Warning == w.warn {
				ok = true
			}
		}
		if !ok {
			t.Errorf("missing problem at line %d containing %q; got:\n%v", w.line, w.sub, ps)
		}
	}
}

func TestEnvOverridesAndSecretFile(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"TRIBUTARY_MQTT_STORAGE_ADDR":                            "10.0.0.1:7400",
		"TRIBUTARY_MQTT_CLUSTERS_0_PASSWORD_FILE":                pw,
		"TRIBUTARY_MQTT_MQTT_TO_KAFKA_0_MAX_RECORD_BYTES":        "2048",
		"TRIBUTARY_MQTT_MQTT_TO_KAFKA_0_MQTT_TOPIC_FILTERS":      "a/#, b/+",
		"TRIBUTARY_MQTT_KAFKA_TO_MQTT_0_QOS":                     "2",
		"TRIBUTARY_MQTT_CLUSTERS_0_SESSION_EXPIRY":               "5m",
		"TRIBUTARY_MQTT_KAFKA_TO_MQTT_0_PROPERTIES_CONTENT_TYPE": "text/plain",
		"TRIBUTARY_MQTT_LISTENER_SESSION_DIR":                    filepath.Join(dir, "sessions"),
	}
	cfg, ps := Load([]byte(good), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err := ps.Err(); err != nil {
		t.Fatal(err)
	}
	if cfg.StorageAddr != "10.0.0.1:7400" || cfg.Clusters[0].Password != "s3cret" || cfg.MQTTToKafka[0].MaxRecordBytes != 2048 {
		t.Errorf("env not applied: %+v %+v", cfg, cfg.Clusters[0])
	}
	if f := cfg.MQTTToKafka[0].Filters; len(f) != 2 || f[1] != "b/+" {
		t.Errorf("filters = %q", f)
	}
	if QoSOr(cfg.KafkaToMQTT[0].QoS, 1) != 2 || cfg.Clusters[0].SessionExpiry.Minutes() != 5 || cfg.KafkaToMQTT[0].Properties.ContentType != "text/plain" {
		t.Errorf("env not applied to pointer/duration/nested fields")
	}
	if cfg.Listener.SessionDir != filepath.Join(dir, "sessions") {
		t.Errorf("listener.session-dir = %q", cfg.Listener.SessionDir)
	}
	_, ps = Load([]byte(good), func(k string) (string, bool) {
		if k == "TRIBUTARY_MQTT_LISTENER_SESSION_DIR" {
			return pw, true
		}
		return "", false
	})
	if ps.Err() == nil || !strings.Contains(ps.Err().Error(), "listener.session-dir") {
		t.Errorf("a session dir that is a file not reported: %v", ps)
	}
	_, ps = Load([]byte(good), func(k string) (string, bool) {
		if k == "TRIBUTARY_MQTT_KAFKA_TO_MQTT_0_QOS" {
			return "high", true
		}
		return "", false
	})
	if ps.Err() == nil || !strings.Contains(ps.Err().Error(), "TRIBUTARY_MQTT_KAFKA_TO_MQTT_0_QOS") {
		t.Errorf("bad env value not reported: %v", ps)
	}
}

func TestYAMLSyntaxAndTypeErrorsHaveLines(t *testing.T) {
	_, ps := Load([]byte("id: x\nclusters: [\n"), noEnv)
	if ps.Err() == nil || ps[0].Line == 0 {
		t.Errorf("syntax error without line: %v", ps)
	}
	_, ps = Load([]byte("id: x\nstore-timeout: soon\n"), noEnv)
	if ps.Err() == nil || ps[0].Line != 2 {
		t.Errorf("type error without line 2: %v", ps)
	}
}

func TestValidateFilter(t *testing.T) {
	for _, f := range []string{"#", "a/+/b", "+", "a/#", "$SYS/#", "/"} {
		if err := ValidateFilter(f); err != nil {
			t.Errorf("%q: %v", f, err)
		}
	}
	for _, f := range []string{"", "a#", "a/#/b", "a+/b", "a/\x00"} {
		if err := ValidateFilter(f); err == nil {
			t.Errorf("%q accepted", f)
		}
	}
}

// Properties a broker would end the connection on (NUL, not UTF-8, a wildcard in
// the response topic) are reported by check, not found by the first publish.
func TestPropertiesMQTTCannotCarry(t *testing.T) {
	src := "listener: {addr: \"127.0.0.1:0\"}\nkafka-to-mqtt:\n  - id: k\n    kafka-topics: [t]\n    properties:\n" +
		"      content-type: \"a\\u0000b\"\n      response-topic: \"reply/#\"\n      user-properties:\n        - {name: n, value: \"x\\0\"}\n"
	_, ps := Load([]byte(src), noEnv)
	for _, w := range []struct {
		line int
		sub  string
	}{{6, `content-type: "a\x00b" contains NUL`}, {7, `response-topic: "reply/#": a response topic cannot hold`}, {9, `user-properties[0].value:`}} {
		ok := false
		for _, p := range ps {
			ok = ok || (p.Line == w.line && strings.Contains(p.Path+": "+p.Msg, w.sub))
		}
		if !ok {
			t.Errorf("missing problem at line %d containing %q; got:\n%v", w.line, w.sub, ps)
		}
	}
}

// A bad value for a key with its own decoding (headers, lists) does not stop the
// decoding there: the keys after it are neither reported missing nor left unchecked,
// and a type error names its key.
func TestDecodingGoesOnAfterABadValue(t *testing.T) {
	src := `listener: {addr: "127.0.0.1:0"}
mqtt-to-kafka:
  - id: a
    mqtt-topic-filters: [a]
    kafka-topic: t
    headers: {x: [1]}
    partitions: many
  - id: b
    mqtt-topic-filters: [b]
    kafka-topic: u
kafka-to-mqtt:
  - id: k
    kafka-topics: [v]
    qos: 7
`
	_, ps := Load([]byte(src), noEnv)
	want := map[int]string{
		6:  "mqtt-to-kafka[0].headers: headers must be none, all or a list",
		7:  "mqtt-to-kafka[0].partitions: cannot unmarshal",
		14: "kafka-to-mqtt[0].qos: QoS 7",
	}
	for line, sub := range want {
		ok := false
		for _, p := range ps {
			ok = ok || (p.Line == line && strings.Contains(p.Text(), sub))
		}
		if !ok {
			t.Errorf("missing problem at line %d containing %q; got:\n%v", line, sub, ps)
		}
	}
	for _, p := range ps {
		if strings.Contains(p.Msg, "is required") {
			t.Errorf("spurious problem after a bad value: %v", p)
		}
	}
}

// An override naming no key (a typo, an index past the file's items) is reported,
// not ignored in silence.
func TestUnknownEnvironmentWarned(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.yaml")
	if err := os.WriteFile(path, []byte("listener: {addr: \"127.0.0.1:0\"}\nmqtt-to-kafka:\n  - {id: a, mqtt-topic-filters: [x], kafka-topic: t}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TRIBUTARY_MQTT_STORAGE_ADRR", "x")
	t.Setenv("TRIBUTARY_MQTT_MQTT_TO_KAFKA_3_ID", "y")
	t.Setenv("TRIBUTARY_MQTT_MQTT_TO_KAFKA_0_KAFKA_TOPIC", "u")
	t.Setenv("TRIBUTARY_MQTT_CONFIG", path)
	cfg, ps, err := LoadFile(path)
	if err != nil {
		t.Fatalf("warnings must not stop the load: %v", err)
	}
	if cfg.MQTTToKafka[0].KafkaTopic != "u" {
		t.Errorf("override not applied")
	}
	var warned []string
	for _, p := range ps {
		if p.Warning && strings.Contains(p.Msg, "names no key") {
			warned = append(warned, p.Msg)
		}
	}
	if len(warned) != 2 || !strings.Contains(strings.Join(warned, "\n"), `TRIBUTARY_MQTT_STORAGE_ADRR names no key of this config; ignored (did you mean TRIBUTARY_MQTT_STORAGE_ADDR?)`) {
		t.Errorf("warnings %q", warned)
	}
}

// storage-tls and coordinator-tls come from the environment too (as compose and the
// k8s overlay set them), and are checked like every TLS block.
func TestBackendTLS(t *testing.T) {
	ca := tlsxtest.NewCA(t).CertFile
	env := map[string]string{"TRIBUTARY_MQTT_STORAGE_TLS_CA_FILE": ca, "TRIBUTARY_MQTT_COORDINATOR_TLS_CA_FILE": ca}
	cfg, ps := Load([]byte(good), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err := ps.Err(); err != nil {
		t.Fatal(err)
	}
	if cfg.StorageTLS.CAFile != ca || cfg.CoordinatorTLS.CAFile != ca {
		t.Fatalf("backend TLS from the environment: %+v %+v", cfg.StorageTLS, cfg.CoordinatorTLS)
	}
	for name, src := range map[string]string{
		"token without TLS": "token-file: /x\n",
		"cert without key":  "storage-tls: {ca-file: " + ca + ", cert-file: " + ca + "}\n",
		"missing CA":        "coordinator-tls: {ca-file: /nonexistent.pem}\n",
		"skip verify":       "storage-tls: {ca-file: " + ca + ", insecure-skip-verify: true}\n",
	} {
		if _, ps := Load([]byte(good+src), noEnv); ps.Err() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// Listener limits: defaults when unset; a negative one, a keep alive or session
// expiry that is not whole seconds or past what MQTT can carry, or queue bytes per
// session over the total, is refused by name.
func TestListenerLimits(t *testing.T) {
	base := "listener: {addr: \"127.0.0.1:0\"%s}\nmqtt-to-kafka:\n  - {id: d, mqtt-topic-filters: [\"d/#\"], kafka-topic: d}\n"
	cfg, ps := Load([]byte(fmt.Sprintf(base, "")), noEnv)
	if err := ps.Err(); err != nil {
		t.Fatal(err)
	}
	l := cfg.Listener
	if l.MaxConnections != DefaultMaxConnections || l.MaxSessionExpiry != DefaultMaxSessionExpiry || l.MaxKeepAlive != DefaultMaxKeepAlive ||
		l.ConnectTimeout != DefaultConnectTimeout || l.StallTimeout != DefaultStallTimeout ||
		l.QueueBytes.Session != DefaultQueueBytesSession || l.QueueBytes.Total != DefaultQueueBytesTotal {
		t.Errorf("defaults not applied: %+v", l)
	}
	if cfg, ps := Load([]byte(fmt.Sprintf(base, ", queue-bytes: {session: 1024}")), noEnv); ps.Err() != nil ||
		cfg.Listener.QueueBytes.Session != 1024 || cfg.Listener.QueueBytes.Total != DefaultQueueBytesTotal {
		t.Errorf("queue-bytes.session alone: %+v %v", cfg.Listener.QueueBytes, ps.Err())
	}
	for _, c := range []struct{ set, key string }{
		{", max-connections: -1", "listener.max-connections"},
		{", max-keepalive: 1.5s", "listener.max-keepalive"},
		{", max-keepalive: 70000s", "listener.max-keepalive"},
		{", max-session-expiry: 2000000h", "listener.max-session-expiry"},
		{", connect-timeout: -1s", "listener.connect-timeout"},
		{", subscriber-stall-timeout: -1s", "listener.subscriber-stall-timeout"},
		{", queue-bytes: {session: -1}", "listener.queue-bytes"},
		{", queue-bytes: {total: -5}", "listener.queue-bytes"},
		{", queue-bytes: {session: 2048, total: 1024}", "listener.queue-bytes.session: must be at most total"},
		{", queue-bytes: {sesion: 2048}", `did you mean "session"`},
	} {
		_, ps := Load([]byte(fmt.Sprintf(base, c.set)), noEnv)
		if err := ps.Err(); err == nil || !strings.Contains(err.Error(), c.key) {
			t.Errorf("%s: %v, want a problem naming %s", c.set, err, c.key)
		}
	}
}

// listener.retained: the store defaults to file with a session-dir and memory
// without, kafka's topic to mqtt-retained; file without a session-dir, an unknown
// store and a topic for another store are problems.
func TestListenerRetained(t *testing.T) {
	base := "mqtt-to-kafka:\n  - {id: a, mqtt-topic-filters: [x], kafka-topic: t}\nlistener:\n  addr: 127.0.0.1:0\n"
	dir := t.TempDir()
	for _, c := range []struct{ extra, store, topic, problem string }{
		{"", RetainedMemory, "", ""},
		{"  session-dir: " + dir + "\n", RetainedFile, "", ""},
		{"  retained: {store: kafka}\n", RetainedKafka, DefaultRetainedTopic, ""},
		{"  retained: {store: kafka, topic: r}\n", RetainedKafka, "r", ""},
		{"  session-dir: " + dir + "\n  retained: {store: memory}\n", RetainedMemory, "", ""},
		{"  retained: {store: file}\n", "", "", "listener.retained.store: file keeps retained messages in session-dir"},
		{"  retained: {store: redis}\n", "", "", `listener.retained.store: must be memory, file or kafka, not "redis"`},
		{"  retained: {store: memory, topic: r}\n", "", "", "listener.retained.topic: only store: kafka"},
		{"  retained: {stor: kafka}\n", "", "", "stor"},
	} {
		cfg, ps := Load([]byte(base+c.extra), noEnv)
		if c.problem != "" {
			if ps.Err() == nil || !strings.Contains(ps.Err().Error(), c.problem) {
				t.Errorf("%q: problems %v, want %q", c.extra, ps, c.problem)
			}
			continue
		}
		if ps.Err() != nil {
			t.Errorf("%q: %v", c.extra, ps)
			continue
		}
		if r := cfg.Listener.Retained; r.Store != c.store || r.Topic != c.topic {
			t.Errorf("%q: retained %+v, want store %q topic %q", c.extra, r, c.store, c.topic)
		}
	}
}

// listener.users: a password (or a malformed hash, or one past the cost bounds)
// where a bcrypt or argon2id hash belongs, a user without a name, a
// bad filter and a missing password-file are problems.
func TestListenerUsers(t *testing.T) {
	base := "mqtt-to-kafka:\n  - {id: a, mqtt-topic-filters: [x], kafka-topic: t}\nlistener:\n  addr: 127.0.0.1:0\n"
	for _, c := range []struct{ extra, problem string }{
		{"  users: [{username: a, password-hash: \"$2a$04$2qKgcNISP4odHzh7tkiWu.DZp/8/a4l7YwMaJFA72KXf1V6okKG9G\", publish: [\"d/%u/#\"]}]\n", ""},
		{"  users: [{username: a, password-hash: \"$argon2id$v=19$m=4096,t=2,p=2$c29tZXNhbHQxMjM0$ujbdBmxtd247nmKHnxZa7U0yXZsrwcNzt0rJgeiohY0\"}]\n", ""},
		{"  users: [{username: a, password-hash: \"$argon2id$v=19$m=4194304,t=2,p=2$c29tZXNhbHQxMjM0$ujbdBmxtd247nmKHnxZa7U0yXZsrwcNzt0rJgeiohY0\"}]\n", "cost parameters out of bounds"},
		{"  users: [{username: a, password-hash: \"$2a$04$abcdefghijklmnopqrstuv\"}]\n", "listener.users[0].password-hash: must be a bcrypt or argon2id hash"},
		{"  users: [{username: a, password-hash: hunter2}]\n", "listener.users[0].password-hash: must be a bcrypt or argon2id hash"},
		{"  users: [{password-hash: \"$2a$04$x\"}]\n", "listener.users[0].username: must be set"},
		{"  users: [{username: a, subscribe: [\"a/#/b\"]}]\n", "listener.users[0]"},
		{"  password-file: /nonexistent/pw\n", "listener.password-file"},
		{"  certificate-login: true\n", "listener.certificate-login: needs listener.tls.ca-file"},
	} {
		_, ps := Load([]byte(base+c.extra), noEnv)
		if c.problem == "" {
			if ps.Err() != nil {
				t.Errorf("%q: %v", c.extra, ps)
			}
			continue
		}
		if ps.Err() == nil || !strings.Contains(ps.Err().Error(), c.problem) {
			t.Errorf("%q: problems %v, want %q", c.extra, ps, c.problem)
		}
	}
}
