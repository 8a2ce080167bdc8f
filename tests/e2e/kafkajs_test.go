package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkajsVersion is the kafkajs release the test installs from npm.
const kafkajsVersion = "2.2.4"

// TestKafkaJSConsumerGroup: a kafkajs (Node) consumer group joins, consumes every
// record of a 3-partition topic and commits; the committed offsets are the end offsets.
func TestKafkaJSConsumerGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	node, dir := nodeScript(ctx, t, filepath.Join("kafkajs", "consumer.js"), "kafkajs@"+kafkajsVersion)

	s := sharedStack(t)
	topic, group := topicName("kjs"), topicName("kjs-group")
	adm := newAdmin(t, s.KafkaAddrs)
	createTopic(t, adm, topic, 3, nil)
	// kafkajs decodes only gzip without plugins: produce uncompressed.
	prod := newClient(t, s.KafkaAddrs, kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(kgo.NoCompression()))
	recs := produceKeyed(t, prod, topic, "js", 900)

	cmd := exec.CommandContext(ctx, node, "consumer.js")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "BROKERS="+s.KafkaAddrs[0], "TOPIC="+topic, "GROUP="+group, "COUNT=900", "TIMEOUT_MS=120000")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kafkajs consumer: %v\nstderr:\n%s", err, tailString(stderr.String(), 4000))
	}
	var res struct {
		Consumed int      `json:"consumed"`
		Keys     []string `json:"keys"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("kafkajs output %q: %v", tailString(stdout.String(), 500), err)
	}
	want := map[string]bool{}
	for _, r := range recs {
		want[string(r.Key)] = true
	}
	for _, k := range res.Keys {
		if !want[k] {
			t.Errorf("kafkajs consumed unexpected key %q", k)
		}
		delete(want, k)
	}
	if len(want) != 0 {
		t.Fatalf("kafkajs missed %d records", len(want))
	}
	committed, err := adm.FetchOffsets(ctxT(t, 20*time.Second), group)
	if err != nil || committed.Error() != nil {
		t.Fatalf("fetch offsets: %v %v", err, committed.Error())
	}
	for p, end := range endOffsets(t, adm, topic) {
		if o, ok := committed.Lookup(topic, p); !ok || o.At != end {
			t.Errorf("partition %d: kafkajs committed %+v, end offset %d", p, o, end)
		}
	}
}
