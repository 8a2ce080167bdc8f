package e2e

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRaftCompactionTransactionsLeaderKill: TestCompactionTransactions' workload on a
// raft cluster, whose replicas each run their own cleaner, with the partition's leader
// SIGKILLed mid-way and restarted (it rebuilds the channel from its WAL and cleans it
// again), and the leader killed once more after the log is clean. On every read, from
// whichever node leads: the read_committed view holds no aborted value and no
// aborted-only key and its newest record of each key is the last committed value;
// read_uncommitted sees no aborted-only key once clean. Both end cleaned to exactly
// one record per key.
func TestRaftCompactionTransactionsLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three storage-core processes")
	}
	s, leader := startRaftStackWith(t, stack.Options{StorageNodes: 3, LogLevel: "warn", StorageFlags: []string{"--cleaner-backoff=200ms"}},
		topicName("raft-compact-warmup"), 1)
	adm := newAdmin(t, s.KafkaAddrs)
	topic := compactTopic(t, adm, "raft-compacttxn", 1000, 2000)
	ch := channel.KafkaPartition(topic, 0)
	tx := txnProducer(t, s.KafkaAddrs, topicName("tid"))
	plain := newClient(t, s.KafkaAddrs, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	want := map[string]string{}
	n := 0
	check := func(stage string) (clean bool) {
		t.Helper()
		com := readCompactTxnView(t, s.KafkaAddrs, plain, topic, true, &n)
		unc := readCompactTxnView(t, s.KafkaAddrs, plain, topic, false, &n)
		newest := map[string]int64{}
		for off, kv := range com.data {
			if strings.HasPrefix(string(kv.value), "aborted") || strings.HasPrefix(string(kv.key), "aborted-only") {
				t.Fatalf("%s: read_committed offset %d holds %s=%s", stage, off, kv.key, kv.value)
			}
			if o, ok := newest[string(kv.key)]; !ok || off > o {
				newest[string(kv.key)] = off
			}
		}
		for k, v := range want {
			if o, ok := newest[k]; !ok || string(com.data[o].value) != v {
				t.Fatalf("%s: read_committed newest %s is %q, want %q", stage, k, com.data[o].value, v)
			}
		}
		return len(com.data) == len(want) && len(unc.data) == len(want)
	}
	rounds := func(from, to int) {
		for r := from; r < to; r++ {
			var ab []*kgo.Record
			for k := range 10 {
				ab = append(ab, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "key-%d", k), Value: fmt.Appendf(nil, "aborted-%d", r)})
			}
			ab = append(ab, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "aborted-only-%d", r), Value: []byte("x")})
			keyedTxn(t, tx, false, ab...)
			var cm []*kgo.Record
			for k := range 10 {
				key, val := fmt.Sprintf("key-%d", k), fmt.Sprintf("committed-%d", r)
				cm = append(cm, &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(val)})
				want[key] = val
			}
			keyedTxn(t, tx, true, cm...)
		}
	}
	rounds(0, 4)
	time.Sleep(1100 * time.Millisecond)
	check("before the kill")
	victim := leader(ch)
	t.Logf("SIGKILL of %s, the partition's leader", victim.Name)
	if err := s.Kill(victim.Name, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	rounds(4, 8)
	if err := s.Restart(ctxT(t, 60*time.Second), victim.Name); err != nil {
		t.Fatal(err)
	}
	waitClean := func(stage string) {
		t.Helper()
		for deadline := time.Now().Add(120 * time.Second); !check(stage); time.Sleep(1100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not cleaned to one record per key after 120 s", stage)
			}
		}
	}
	waitClean("after the restart")
	victim = leader(ch)
	t.Logf("SIGKILL of %s, the leader of the cleaned partition", victim.Name)
	if err := s.Kill(victim.Name, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	check("on the next leader")
	final := &kgo.Record{Topic: topic, Key: []byte("key-0"), Value: []byte("final")}
	keyedTxn(t, tx, true, final)
	want["key-0"] = "final"
	waitClean("after the second kill")
	// Back, the killed node catches up; above what the cleaners rewrote (each replica
	// cleans its own segments) the replicas are byte-identical.
	if err := s.Restart(ctxT(t, 60*time.Second), victim.Name); err != nil {
		t.Fatal(err)
	}
	ends, err := adm.ListEndOffsets(ctxT(t, 10*time.Second), topic)
	o, ok := ends.Lookup(topic, 0)
	if err != nil || !ok || o.Err != nil {
		t.Fatalf("ListOffsets latest: %+v %v", o, err)
	}
	checkStackReplicas(t, s, map[string]int64{ch: o.Offset})
}
