package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// checkTxnTopic checks what the client tests wrote to topic (2 partitions): c1, c2, c3
// committed, ab aborted, each value list closed by "done". read_committed sees exactly
// the committed records, read_uncommitted all of them, neither a control record.
func checkTxnTopic(t *testing.T, addrs []string, topic string) {
	t.Helper()
	committed := flatten(consumeUntil(t, addrs, topic, 2, true, "done"))
	want := append(append(seq("c1", 10), seq("c2", 10)...), seq("c3", 10)...)
	sort.Strings(want)
	if strings.Join(committed, ",") != strings.Join(want, ",") {
		t.Errorf("read_committed: %v, want %v", committed, want)
	}
	all := flatten(consumeUntil(t, addrs, topic, 2, false, "done"))
	want = append(want, seq("ab", 10)...)
	sort.Strings(want)
	if strings.Join(all, ",") != strings.Join(want, ",") {
		t.Errorf("read_uncommitted: %v, want %v", all, want)
	}
}

// checkGroupOffset checks the group's committed offset of topic partition 0.
func checkGroupOffset(t *testing.T, addrs []string, group, topic string, want int64) {
	t.Helper()
	offs, err := newAdmin(t, addrs).FetchOffsets(ctxT(t, 30*time.Second), group)
	if err != nil {
		t.Fatalf("OffsetFetch %s: %v", group, err)
	}
	if o, ok := offs.Lookup(topic, 0); !ok || o.At != want {
		t.Errorf("group %s offset of %s/0: %+v (found %v), want %d (committed in the transaction)", group, topic, o, ok, want)
	}
}

// TestTxnKafkaJS: kafkajs's transactional producer commits, aborts, commits after the
// abort and commits consumer offsets inside a transaction (sendOffsets).
func TestTxnKafkaJS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	node, dir := nodeScript(ctx, t, filepath.Join("kafkajs", "txn.js"), "kafkajs@"+kafkajsVersion)
	s := sharedStack(t)
	topic, group := topicName("kjstxn"), topicName("kjstxn-group")
	createTopic(t, newAdmin(t, s.KafkaAddrs), topic, 2, nil)
	cmd := exec.CommandContext(ctx, node, "txn.js")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "BROKERS="+s.KafkaAddrs[0], "TOPIC="+topic, "GROUP="+group, "TID="+topicName("tid"), "OFFSET=5")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kafkajs transactional producer: %v\nstderr:\n%s", err, tailString(stderr.String(), 4000))
	}
	checkTxnTopic(t, s.KafkaAddrs, topic)
	checkGroupOffset(t, s.KafkaAddrs, group, topic, 5)
}

// TestTxnSarama: Sarama's transactional producer (Config.Version 3.0: Sarama does not
// negotiate versions) does the same.
func TestTxnSarama(t *testing.T) {
	s := sharedStack(t)
	topic, group := topicName("saratxn"), topicName("saratxn-group")
	createTopic(t, newAdmin(t, s.KafkaAddrs), topic, 2, nil)
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_0_0_0
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Producer.Transaction.ID = topicName("tid")
	cfg.Producer.Retry.Max = 10
	cfg.Net.MaxOpenRequests = 1
	prod, err := sarama.NewSyncProducer(s.KafkaAddrs, cfg)
	if err != nil {
		t.Fatalf("sarama producer: %v", err)
	}
	defer func() { _ = prod.Close() }()
	txn := func(vals []string, commit bool, offsets map[string][]*sarama.PartitionOffsetMetadata) {
		t.Helper()
		if err := prod.BeginTxn(); err != nil {
			t.Fatalf("BeginTxn: %v", err)
		}
		for i, v := range vals {
			if _, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: int32(i % 2), Value: sarama.StringEncoder(v)}); err != nil {
				t.Fatalf("SendMessage %s: %v", v, err)
			}
		}
		if offsets != nil {
			if err := prod.AddOffsetsToTxn(offsets, group); err != nil {
				t.Fatalf("AddOffsetsToTxn: %v", err)
			}
		}
		if commit {
			err = prod.CommitTxn()
		} else {
			err = prod.AbortTxn()
		}
		if err != nil {
			t.Fatalf("end transaction (commit %v): %v", commit, err)
		}
	}
	txn(seq("c1", 10), true, nil)
	txn(seq("ab", 10), false, nil)
	txn(seq("c2", 10), true, nil)
	txn(seq("c3", 10), true, map[string][]*sarama.PartitionOffsetMetadata{topic: {{Partition: 0, Offset: 7}}})
	txn([]string{"done", "done"}, true, nil)
	checkTxnTopic(t, s.KafkaAddrs, topic)
	checkGroupOffset(t, s.KafkaAddrs, group, topic, 7)
}
